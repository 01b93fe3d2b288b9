"""Two factors for whoever moves money in the admin: every money-moving URL and action
sends a person without a fresh code to the code page and does nothing, for support
agents and superusers alike; a code makes it work; idleness asks again."""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from ledger_app.admin.second_factor import FRESH_AT
from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory
from tests.second_factor import current_code, device_of, verified

pytestmark = pytest.mark.django_db

VERIFY = reverse("verify-second-factor")
CHARGES = reverse("admin:ledger_app_charge_changelist")
QUEUE = reverse("admin:ledger_app_refundattention_changelist")
# Actions that need the refund permission but never reach the provider.
NOT_MONEY = {"mark_handled"}


def refund_url(charge) -> str:
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


@pytest.fixture(params=["support agent", "superuser"])
def person(request, support_agent, django_user_model):
    if request.param == "superuser":
        return django_user_model.objects.create_superuser("root", "root@example.com", "pw-1-x")
    return support_agent


@pytest.fixture
def unverified(client, person):
    """Signed in with the password; no code entered in this session."""
    device_of(person)
    client.force_login(person)
    return client


def sent_to_code_page(response, back_to: str) -> bool:
    """A redirect to the code page that comes back to a URL containing `back_to`."""
    if response.status_code != 302 or not response.url.startswith(f"{VERIFY}?"):
        return False
    return back_to in parse_qs(urlsplit(response.url).query)["next"][0]


def waiting_refund():
    """A refund the provider has not settled: in the needs-attention queue."""
    charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "timeout"})
    return create_refund(RefundRequest(charge_id=charge.pk, amount=300)).item


class TestWithoutAFreshCode:
    def test_the_refund_form_sends_the_person_to_the_code_page(self, unverified):
        charge = ChargeFactory(amount=1_000)
        url = f"{refund_url(charge)}?form={'a' * 32}"

        response = unverified.get(url)

        assert sent_to_code_page(response, f"?form={'a' * 32}")  # back to the same form

    def test_posting_the_refund_form_refunds_nothing(self, unverified):
        charge = ChargeFactory(amount=1_000)

        response = unverified.post(
            refund_url(charge),
            {
                "amount": "5.00",
                "reason": "duplicate",
                "idempotency_key": f"admin:{'b' * 32}",
                "charge_state": "0",
            },
        )

        assert sent_to_code_page(response, quote(charge.pk))
        assert Refund.objects.count() == 0
        charge.refresh_from_db()
        assert charge.amount_refunded == 0

    @pytest.mark.parametrize("confirming", [False, True])
    def test_the_bulk_refund_refunds_nothing(self, unverified, confirming):
        charge = ChargeFactory(amount=1_000)
        data = {"action": "refund_in_full", "_selected_action": [charge.pk]}
        if confirming:
            data.update({"post": "yes", "batch_key": "x", "confirmed": "y", "reason": "duplicate"})

        response = unverified.post(CHARGES, data)

        assert sent_to_code_page(response, CHARGES)
        assert Refund.objects.count() == 0

    @pytest.mark.parametrize("action", ["retry_dispatch", "reconcile_now"])
    def test_the_queue_actions_that_reach_the_provider_send_nothing(self, unverified, action):
        refund = waiting_refund()
        asked_before = ProviderRequest.objects.count()

        response = unverified.post(QUEUE, {"action": action, "_selected_action": [refund.pk]})

        assert sent_to_code_page(response, QUEUE)
        assert ProviderRequest.objects.count() == asked_before
        assert refund.dispatch_attempts == Refund.objects.get(pk=refund.pk).dispatch_attempts

    def test_looking_needs_no_code(self, unverified):
        charge = ChargeFactory(amount=1_000)

        for url in [CHARGES, QUEUE, reverse("admin:ledger_app_charge_change", args=[charge.pk])]:
            assert unverified.get(url).status_code == 200, url


def test_every_action_that_needs_the_refund_permission_is_gated_or_named_harmless():
    """A new money-moving action cannot be added without the gate: each admin action that
    needs the refund permission is in its admin's money_actions, or named here as one that
    never reaches the provider; each that needs the approve permission (approving sends a
    refund, rejecting releases its reservation) is in money_actions, no exceptions."""
    approving = []
    for model_admin in admin.site._registry.values():
        money_actions: frozenset[str] = getattr(model_admin, "money_actions", frozenset())
        for name in getattr(model_admin, "actions", None) or []:
            action = getattr(model_admin, name, None)
            needs = getattr(action, "allowed_permissions", ())
            if "refund" in needs:
                assert name in money_actions or name in NOT_MONEY, (
                    f"{type(model_admin).__name__}.{name} needs the refund permission but "
                    "is neither in money_actions nor known to move no money"
                )
            if "approve" in needs:
                approving.append(name)
                assert name in money_actions, (
                    f"{type(model_admin).__name__}.{name} needs the approve permission but "
                    "is not in money_actions"
                )
    assert {"approve_refunds", "reject_refunds"} <= set(approving)


class TestWithACode:
    def test_a_code_from_the_persons_authenticator_lets_them_refund(self, unverified, person):
        charge = ChargeFactory(amount=1_000)
        asked = unverified.get(refund_url(charge), follow=True)
        code_page = asked.redirect_chain[-1][0]

        back = unverified.post(code_page, {"code": current_code(device_of(person))}, follow=True)

        assert b'name="amount"' in back.content  # the refund form itself
        key_found = re.search(rb'name="idempotency_key" value="([^"]+)"', back.content)
        state_found = re.search(rb'name="charge_state" value="([^"]+)"', back.content)
        assert key_found and state_found, back.content
        key, state = key_found.group(1), state_found.group(1)
        done = unverified.post(
            refund_url(charge),
            {
                "amount": "4.00",
                "reason": "duplicate",
                "idempotency_key": key.decode(),
                "charge_state": state.decode(),
            },
        )
        assert done.status_code == 302
        assert Refund.objects.get().amount == 400

    def test_the_queue_action_runs_after_a_code(self, client, support_agent):
        refund = waiting_refund()
        verified(client, support_agent)

        client.post(QUEUE, {"action": "reconcile_now", "_selected_action": [refund.pk]})

        assert ProviderRequest.objects.filter(operation__startswith="refund").count() >= 2

    def test_a_wrong_code_is_refused_and_counts_against_the_device(self, unverified, person):
        device = device_of(person)
        right = current_code(device)
        wrong = f"{(int(right) + 1) % 1_000_000:06d}"

        response = unverified.post(VERIFY, {"code": wrong, "next": CHARGES})

        assert response.status_code == 200
        assert b"That code is not right" in response.content
        device.refresh_from_db()
        assert device.throttling_failure_count == 1
        # Right away, even the right code waits out the throttle (django-otp doubles it).
        again = unverified.post(VERIFY, {"code": right, "next": CHARGES})
        assert again.status_code == 200
        assert unverified.get(refund_url(ChargeFactory(amount=1))).url.startswith(VERIFY)

    def test_another_persons_code_does_not_count(self, unverified, django_user_model):
        other = django_user_model.objects.create_user("other", password="x", is_staff=True)

        response = unverified.post(VERIFY, {"code": current_code(device_of(other)), "next": "/"})

        assert response.status_code == 200
        assert b"That code is not right" in response.content

    def test_without_an_authenticator_the_page_says_how_to_get_one(self, client, support_agent):
        client.force_login(support_agent)  # no device enrolled

        page = client.get(VERIFY)
        refused = client.post(VERIFY, {"code": "123456", "next": CHARGES})

        assert b"manage.py enrol_second_factor agent" in page.content
        assert refused.status_code == 200
        assert client.get(refund_url(ChargeFactory(amount=1))).url.startswith(VERIFY)

    def test_next_never_leaves_the_site(self, unverified, person):
        response = unverified.post(
            VERIFY,
            {"code": current_code(device_of(person)), "next": "https://evil.example/admin/"},
        )

        assert response.status_code == 302 and response.url == reverse("admin:index")


class TestTheCodeStartsANewSession:
    def test_the_session_cookie_from_before_the_code_no_longer_works_after(
        self, unverified, person, settings
    ):
        cookie = settings.SESSION_COOKIE_NAME
        before = unverified.cookies[cookie].value

        response = unverified.post(VERIFY, {"code": current_code(device_of(person)), "next": "/"})

        assert response.status_code == 302
        assert unverified.cookies[cookie].value != before
        # The person, with the new cookie, is still signed in and may move money.
        form = unverified.get(refund_url(ChargeFactory(amount=1_000)), follow=True)
        assert form.status_code == 200 and b'name="amount"' in form.content
        assert VERIFY not in form.request["PATH_INFO"]
        # The old cookie is nobody's session any more: the admin asks to sign in.
        stale = Client()
        stale.cookies[cookie] = before
        answer = stale.get(CHARGES)
        assert answer.status_code == 302 and answer["Location"].startswith(reverse("admin:login"))


class TestIdleTime:
    def test_idle_longer_than_the_setting_asks_again(self, agent_client, settings):
        charge = ChargeFactory(amount=1_000)
        assert agent_client.get(refund_url(charge)).status_code == 302  # to a form of its own
        assert not agent_client.get(refund_url(charge)).url.startswith(VERIFY)

        session = agent_client.session
        session[FRESH_AT] = time.time() - settings.ADMIN_OTP_IDLE_MINUTES * 60 - 1
        session.save()

        assert agent_client.get(refund_url(charge)).url.startswith(VERIFY)

    def test_opening_a_page_leaves_the_idle_clock_and_moving_money_restarts_it(self, agent_client):
        charge = ChargeFactory(amount=1_000)
        session = agent_client.session
        almost_stale = time.time() - 4 * 60
        session[FRESH_AT] = almost_stale
        session.save()

        form = agent_client.get(refund_url(charge), follow=True)
        assert agent_client.session[FRESH_AT] == almost_stale  # looking is not moving money
        key_found = re.search(rb'name="idempotency_key" value="([^"]+)"', form.content)
        state_found = re.search(rb'name="charge_state" value="([^"]+)"', form.content)
        assert key_found and state_found, form.content
        key, state = key_found.group(1), state_found.group(1)
        done = agent_client.post(
            form.redirect_chain[-1][0],
            {
                "amount": "1.00",
                "reason": "duplicate",
                "idempotency_key": key.decode(),
                "charge_state": state.decode(),
            },
        )

        assert done.status_code == 302 and Refund.objects.get().amount == 100
        assert agent_client.session[FRESH_AT] > almost_stale + 200

    def test_a_new_sign_in_needs_a_new_code(self, agent_client, support_agent):
        agent_client.logout()
        agent_client.force_login(support_agent)

        assert agent_client.get(refund_url(ChargeFactory(amount=1))).url.startswith(VERIFY)


def test_the_demo_may_switch_the_second_factor_off(client, support_agent, settings):
    settings.ADMIN_OTP_REQUIRED = False
    client.force_login(support_agent)

    response = client.get(refund_url(ChargeFactory(amount=1_000)))

    assert response.status_code == 302 and "?form=" in response.url


def test_enrol_second_factor_replaces_the_old_authenticator(support_agent, capsys):
    from django.core.management import call_command

    old = device_of(support_agent)
    call_command("enrol_second_factor", "agent")

    out = capsys.readouterr().out
    assert "otpauth://totp/" in out and "secret:" in out
    assert not type(old).objects.filter(pk=old.pk).exists()
    assert type(old).objects.filter(user=support_agent, confirmed=True).count() == 1


class TestActionNamedMoreThanOnce:
    """Django runs the first `action` of a post and the admin page has one per action bar:
    a post naming a money action anywhere among several is gated, whatever comes last."""

    @pytest.mark.parametrize("order", ["money first", "money last"])
    def test_the_bulk_refund_is_gated(self, unverified, order):
        charge = ChargeFactory(amount=1_000)
        actions = ["refund_in_full", "delete_selected"]
        if order == "money last":
            actions.reverse()

        response = unverified.post(
            CHARGES,
            {"action": actions, "index": "0", "post": "yes", "_selected_action": [charge.pk]},
        )

        assert sent_to_code_page(response, CHARGES)
        assert Refund.objects.count() == 0

    def test_approving_is_gated(self, client, support_agent, django_user_model):
        from django.contrib.auth.models import Group

        from ledger_app.models import RefundLimit

        RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=100)
        waiting = create_refund(
            RefundRequest(charge_id=ChargeFactory(amount=1_000).pk, amount=500, actor=support_agent)
        ).item
        lead = django_user_model.objects.create_user("lead", password="x", is_staff=True)
        lead.groups.add(Group.objects.get(name="Support leads"))
        device_of(lead)
        client.force_login(lead)  # a password, no code
        queue = reverse("admin:ledger_app_refundapproval_changelist")

        response = client.post(
            queue,
            {
                "action": ["approve_refunds", "nope"],
                "post": "yes",
                "_selected_action": [waiting.pk],
            },
        )

        assert sent_to_code_page(response, queue)
        assert Refund.objects.get(pk=waiting.pk).status == Refund.Status.AWAITING_APPROVAL
