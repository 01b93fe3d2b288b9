"""Four eyes in the admin: a refund over its requester's limit waits, reserved, in the
"Refunds awaiting approval" queue; a support lead approves it (it is then sent) or rejects
it with a note (canceled, released), never their own, and only with a fresh code. The
refund form says what the limits are; the index says how much work waits; superusers set
the limits."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from ledger_app.admin.second_factor import FRESH_AT
from ledger_app.approvals.services import approve_refund
from ledger_app.models import Charge, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import books
from tests.second_factor import device_of, verified

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]

QUEUE = reverse("admin:ledger_app_refundapproval_changelist")
CHARGES = reverse("admin:ledger_app_charge_changelist")
LIMITS = reverse("admin:ledger_app_refundlimit_changelist")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def agent_limit(support_agent) -> RefundLimit:
    """The agent may refund up to $500.00 at a time and $2,000.00 a day on their own."""
    return RefundLimit.objects.create(
        user=support_agent, currency="usd", per_refund=50_000, per_day=200_000
    )


@pytest.fixture
def lead(django_user_model):
    user = django_user_model.objects.create_user("lead", is_staff=True)
    user.groups.add(Group.objects.get(name="Support leads"))
    return user


@pytest.fixture
def lead_client(lead):
    return verified(Client(), lead)


@pytest.fixture
def waiting(support_agent, agent_limit) -> Refund:
    """$600.00 asked for by the agent: over their $500.00, so awaiting approval."""
    charge = ChargeFactory(amount=100_000)
    refund = create_refund(
        RefundRequest(
            charge_id=charge.pk, amount=60_000, actor=support_agent, source=Refund.Source.ADMIN
        )
    ).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    return refund


def decide(client, action: str, refunds, **confirm):
    """The queue's action on `refunds`: its confirmation page, or with post=yes its result."""
    return client.post(
        QUEUE, {"action": action, "_selected_action": [r.pk for r in refunds], **confirm}
    )


def told(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def text_of(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def refund_form(client, charge):
    return client.get(
        reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)]), follow=True
    )


def hidden(response, name: str) -> str:
    found = re.search(rb'name="' + name.encode() + rb'" value="([^"]*)"', response.content)
    assert found, f"no hidden {name} on the page"
    return found[1].decode()


class TestTheRefundForm:
    def test_shows_the_requesters_limits_and_what_they_refunded_today(
        self, agent_client, support_agent, agent_limit
    ):
        charge = ChargeFactory(amount=100_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=35_000, actor=support_agent))

        page = refund_form(agent_client, charge)

        assert (
            "Your limits in USD: $500.00 per refund, $2,000.00 a day; refunded today without "
            "approval: $350.00. Above them the refund waits for a lead’s approval."
        ) in text_of(page)

    def test_says_nothing_of_limits_to_someone_without_any(self, agent_client):
        assert "Your limits" not in text_of(refund_form(agent_client, ChargeFactory()))

    def test_a_refund_over_the_limit_awaits_approval_with_its_amount_reserved(
        self, agent_client, agent_limit
    ):
        charge = ChargeFactory(amount=100_000)
        page = refund_form(agent_client, charge)

        done = agent_client.post(
            reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)]),
            {
                "amount": "600.00",
                "reason": "requested_by_customer",
                "idempotency_key": hidden(page, "idempotency_key"),
                "charge_state": hidden(page, "charge_state"),
            },
        )

        assert done.status_code == 302
        refund = Refund.objects.get()
        charge.refresh_from_db()
        assert refund.status == Refund.Status.AWAITING_APPROVAL
        assert charge.amount_refunded == 60_000
        assert ProviderRequest.objects.count() == 0  # nothing sent
        [message] = done.wsgi_request._messages
        assert message.level_tag == "warning"
        assert f"Refund {refund.pk} of $600.00 is over your limit and is awaiting approval" in str(
            message
        )
        assert "the amount is reserved on the charge and nothing is sent" in str(message)

    def test_the_bulk_refund_over_the_limit_says_which_await_approval(
        self, agent_client, agent_limit
    ):
        small, large = ChargeFactory(amount=10_000), ChargeFactory(amount=70_000)
        page = agent_client.post(
            CHARGES, {"action": "refund_in_full", "_selected_action": [small.pk, large.pk]}
        )

        done = agent_client.post(
            CHARGES,
            {
                "action": "refund_in_full",
                "_selected_action": [small.pk, large.pk],
                "post": "yes",
                "batch_key": hidden(page, "batch_key"),
                "confirmed": hidden(page, "confirmed"),
                "reason": "duplicate",
                "note": "Charged twice",
            },
        )

        messages = told(done)
        assert any(m.startswith("Refunded:") and small.pk in m for m in messages)
        assert any(
            m.startswith("Waiting for approval (over your limit): amounts reserved:")
            and large.pk in m
            for m in messages
        )
        assert Refund.objects.get(charge=large).status == Refund.Status.AWAITING_APPROVAL


class TestApproving:
    def test_a_lead_approves_after_a_confirmation_and_the_refund_is_sent(
        self, lead_client, lead, waiting
    ):
        confirmation = decide(lead_client, "approve_refunds", [waiting])
        done = decide(lead_client, "approve_refunds", [waiting], post="yes", note="Known customer")

        assert confirmation.status_code == 200
        assert waiting.pk in text_of(confirmation) and "USD: $600.00" in text_of(confirmation)
        assert done.status_code == 302
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.SUCCEEDED
        assert (waiting.decided_by, waiting.decision_note) == ("user:lead", "Known customer")
        assert told(done) == [f"Approved and refunded: 1 refund — {waiting.pk} $600.00: succeeded"]
        [entry] = LogEntry.objects.filter(object_id=waiting.pk)
        assert entry.user == lead
        assert entry.change_message == "Approved $600.00, now succeeded: Known customer"
        assert f'value="{waiting.pk}"' not in lead_client.get(QUEUE).content.decode()

    def test_the_refunds_own_page_offers_the_decision_to_a_lead_only(
        self, lead_client, agent_client, waiting
    ):
        url = reverse("admin:ledger_app_refund_change", args=[quote(waiting.pk)])

        for_lead = lead_client.get(url).content.decode()
        for_agent = agent_client.get(url).content.decode()

        assert 'value="approve_refunds"' in for_lead and 'value="reject_refunds"' in for_lead
        assert "approve_refunds" not in for_agent

    def test_the_requester_cannot_approve_their_own_refund(
        self, agent_client, support_agent, waiting
    ):
        support_agent.user_permissions.add(Permission.objects.get(codename="approve_refund"))

        done = decide(agent_client, "approve_refunds", [waiting], post="yes", note="")

        assert told(done) == [f"Refused: 1 refund — {waiting.pk} $600.00 (approval_by_requester)"]
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.AWAITING_APPROVAL
        assert not LogEntry.objects.filter(object_id=waiting.pk).exists()

    def test_one_decided_meanwhile_or_expired_is_told_as_such(self, lead_client, lead, waiting):
        expired = create_refund(
            RefundRequest(
                charge_id=ChargeFactory(amount=100_000).pk,
                amount=70_000,
                actor=waiting.created_by,
            )
        ).item
        Refund.objects.filter(pk=expired.pk).update(
            approval_expires_at=timezone.now() - timedelta(minutes=1)
        )
        approve_refund(refund_id=waiting.pk, approver=lead)

        done = decide(lead_client, "approve_refunds", [waiting, expired], post="yes")

        assert sorted(told(done)) == [
            f"Not approved in time: canceled, amount released (approval_expired): 1 refund — "
            f"{expired.pk} $700.00",
            "Not decided here, because it is no longer awaiting approval "
            f"(refund_not_awaiting_approval): 1 refund — {waiting.pk} $600.00 (succeeded by "
            "user:lead)",
        ]
        expired.refresh_from_db()
        assert expired.status == Refund.Status.CANCELED

    def test_without_a_fresh_code_approving_asks_for_one_and_does_nothing(
        self, client, lead, waiting
    ):
        device_of(lead)
        client.force_login(lead)

        asked = decide(client, "approve_refunds", [waiting], post="yes")

        assert asked.status_code == 302
        assert asked.url.startswith(reverse("verify-second-factor"))
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.AWAITING_APPROVAL


class TestRejecting:
    def test_needs_a_note(self, lead_client, waiting):
        page = decide(lead_client, "reject_refunds", [waiting], post="yes", note="  ")

        assert page.status_code == 200
        assert "note_required" in page.content.decode()
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.AWAITING_APPROVAL

    def test_cancels_the_refund_and_releases_its_amount(self, lead_client, lead, waiting):
        before = books(waiting.charge)

        done = decide(lead_client, "reject_refunds", [waiting], post="yes", note="Out of policy")

        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.CANCELED
        assert Charge.objects.get(pk=waiting.charge_id).amount_refunded == 0
        assert books(waiting.charge) != before
        assert told(done) == [
            f"Rejected: canceled, amount released: 1 refund — {waiting.pk} $600.00"
        ]
        [entry] = LogEntry.objects.filter(object_id=waiting.pk, user=lead)
        assert entry.change_message == "Rejected $600.00: Out of policy"
        assert ProviderRequest.objects.count() == 0


class TestWhoMay:
    def test_an_agent_sees_the_queue_but_no_action_and_cannot_decide(self, agent_client, waiting):
        listing = agent_client.get(QUEUE)
        posted = decide(agent_client, "approve_refunds", [waiting], post="yes")

        assert listing.status_code == 200 and waiting.pk in listing.content.decode()
        assert b"approve_refunds" not in listing.content
        assert posted.status_code == 200  # the list again: no action of theirs by that name
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.AWAITING_APPROVAL

    def test_staff_without_the_view_permission_get_403(self, django_user_model, waiting):
        bare = verified(Client(), django_user_model.objects.create_user("bare", is_staff=True))

        assert bare.get(QUEUE).status_code == 403
        assert decide(bare, "approve_refunds", [waiting], post="yes").status_code == 403


def test_the_index_counts_the_queues_and_links_them(lead_client, waiting):
    create_refund(
        RefundRequest(
            charge_id=ChargeFactory(amount=1_000, metadata={"simulate_refund": "decline"}).pk,
            amount=100,
        )
    )

    index = lead_client.get(reverse("admin:index")).content.decode()

    assert re.search(rf'<a href="{QUEUE}">Refunds awaiting approval</a>: <strong[^>]*>1<', index)
    attention = reverse("admin:ledger_app_refundattention_changelist")
    assert re.search(
        rf'<a href="{attention}">Refunds needing attention</a>: <strong[^>]*>1<', index
    )


class TestLimitsAdmin:
    def test_a_superuser_sets_a_limit_in_major_units(self, admin_client, support_agent):
        done = admin_client.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {
                "group": Group.objects.get(name="Support agents").pk,
                "currency": "USD",
                "per_refund": "500.00",
                "per_day": "",
            },
        )

        assert done.status_code == 302
        limit = RefundLimit.objects.get()
        assert (limit.currency, limit.per_refund, limit.per_day) == ("usd", 50_000, None)
        listed = text_of(admin_client.get(LIMITS))
        assert "Group: Support agents USD $500.00 no limit" in listed

    def test_a_limit_names_exactly_one_subject(self, admin_client, support_agent):
        page = admin_client.post(
            reverse("admin:ledger_app_refundlimit_add"),
            {
                "group": Group.objects.get(name="Support agents").pk,
                "user": support_agent.pk,
                "currency": "usd",
                "per_refund": "1.005",
            },
        )

        text = page.content.decode()
        assert page.status_code == 200
        assert "invalid_subject" in text and "invalid_amount" in text
        assert "is violated" not in text  # said once, in words, not as the database's check
        assert not RefundLimit.objects.exists()

    def test_leads_may_look_but_not_set(self, lead_client, agent_limit):
        assert lead_client.get(LIMITS).status_code == 200
        assert lead_client.get(reverse("admin:ledger_app_refundlimit_add")).status_code == 403
        change = reverse("admin:ledger_app_refundlimit_change", args=[agent_limit.pk])
        assert lead_client.post(change, {"currency": "usd"}).status_code == 403


class TestConfirmationWording:
    """One refund is "this refund … it"; several are "these N refunds … each … them"."""

    @pytest.fixture
    def three(self, waiting, support_agent):
        more = [
            create_refund(
                RefundRequest(
                    charge_id=ChargeFactory(amount=100_000).pk,
                    amount=60_000,
                    actor=support_agent,
                    source=Refund.Source.ADMIN,
                )
            ).item
            for _ in range(2)
        ]
        return [waiting, *more]

    @pytest.mark.parametrize(
        ("action", "asked", "then", "button"),
        [
            ("approve_refunds", "Approve this refund?", "It is then sent", "Yes, approve it"),
            ("reject_refunds", "Reject this refund?", "It is canceled", "Yes, reject it"),
        ],
    )
    def test_one_refund_is_spoken_of_in_the_singular(
        self, lead_client, waiting, action, asked, then, button
    ):
        response = decide(lead_client, action, [waiting])
        page = text_of(response)

        assert f"{asked} {then}" in page
        assert f'value="{button}"' in response.content.decode()
        assert "Each is" not in page and "approve them" not in page and "reject them" not in page

    @pytest.mark.parametrize(
        ("action", "asked", "then", "button"),
        [
            (
                "approve_refunds",
                "Approve these 3 refunds?",
                "Each is then sent",
                "Yes, approve them",
            ),
            ("reject_refunds", "Reject these 3 refunds?", "Each is canceled", "Yes, reject them"),
        ],
    )
    def test_several_refunds_are_spoken_of_in_the_plural(
        self, lead_client, three, action, asked, then, button
    ):
        response = decide(lead_client, action, three)

        assert f"{asked} {then}" in text_of(response)
        assert f'value="{button}"' in response.content.decode()


def test_a_decision_that_went_through_restarts_the_idle_clock(lead_client, waiting):
    session = lead_client.session
    almost_stale = session[FRESH_AT] - 4 * 60
    session[FRESH_AT] = almost_stale
    session.save()

    decide(lead_client, "reject_refunds", [waiting])  # the confirmation page: nothing decided
    assert lead_client.session[FRESH_AT] == almost_stale
    done = decide(lead_client, "reject_refunds", [waiting], post="yes", note="Not ours")

    assert done.status_code == 302
    assert lead_client.session[FRESH_AT] > almost_stale + 200
