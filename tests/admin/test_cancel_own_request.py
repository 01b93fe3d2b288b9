"""A support agent takes back their own refund request while it waits for a lead: "Cancel my
request…" on the refund's page (the refund list's action), a confirmation page, then
cancel_refund. Only the person who asked: another agent sees no button and a forged post
changes nothing; a lead is offered Reject (with its note) and the admin refuses a lead's cancel
of someone else's request, although the service would allow it. A fresh code is needed, as for
every admin write, and a refund no longer awaiting approval is told as such."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group
from django.test import Client, RequestFactory
from django.urls import reverse

from ledger_app.access.api_keys import create_api_key
from ledger_app.admin.base import ReadOnlyAdmin
from ledger_app.admin.second_factor import FRESH_AT
from ledger_app.approvals.services import approve_refund
from ledger_app.models import Charge, LedgerEntry, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, rows_written
from tests.second_factor import device_of, verified

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]

REFUNDS = reverse("admin:ledger_app_refund_changelist")
ACTION = "cancel_own_requests"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def waiting(support_agent) -> Refund:
    """$600.00 asked for by the agent in the admin: over their $500.00, so awaiting a lead."""
    RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=50_000)
    refund = create_refund(
        RefundRequest(
            charge_id=ChargeFactory(amount=100_000).pk,
            amount=60_000,
            actor=support_agent,
            source=Refund.Source.ADMIN,
        )
    ).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    assert Charge.objects.get(pk=refund.charge_id).amount_refunded == 60_000
    return refund


def staff(django_user_model, name: str, group: str):
    user = django_user_model.objects.create_user(name, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def other_agent(django_user_model):
    return staff(django_user_model, "other-agent", "Support agents")


@pytest.fixture
def lead(django_user_model):
    return staff(django_user_model, "lead", "Support leads")


def page_of(refund: Refund) -> str:
    return reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])


def cancel(client, refunds, **confirm):
    """The action on `refunds`: its confirmation page, or with post=yes its result."""
    return client.post(
        REFUNDS, {"action": ACTION, "_selected_action": [r.pk for r in refunds], **confirm}
    )


def told(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def text_of(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def unchanged(refund: Refund) -> bool:
    before = (refund.status, refund.decided_by, refund.decided_at)
    refund.refresh_from_db()
    return (refund.status, refund.decided_by, refund.decided_at) == before


class TestTheRequester:
    def test_cancels_their_waiting_refund_after_a_confirmation(
        self, agent_client, support_agent, waiting
    ):
        page = agent_client.get(page_of(waiting)).content.decode()
        asked = cancel(agent_client, [waiting])
        rows_before = rows_written()

        done = cancel(agent_client, [waiting], post="yes")

        assert f'value="{ACTION}"' in page and "Cancel my request…" in page
        assert asked.status_code == 200
        assert "Cancel this refund you asked for? It is canceled" in text_of(asked)
        assert 'value="Yes, cancel it"' in asked.content.decode()
        assert done.status_code == 302
        assert told(done) == [
            "Canceled at your request: amount released, nothing sent: 1 refund — "
            f"{waiting.pk} $600.00"
        ]
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.CANCELED
        assert waiting.decided_by == "user:agent"
        assert waiting.decision_note == "canceled by its requester"
        assert Charge.objects.get(pk=waiting.charge_id).amount_refunded == 0
        released = LedgerEntry.objects.get(refund=waiting, kind=LedgerEntry.Kind.REFUND_RELEASED)
        assert (released.amount, released.actor) == (60_000, "user:agent")
        [entry] = LogEntry.objects.filter(object_id=waiting.pk, user=support_agent)
        assert entry.change_message == "Canceled my request for $600.00: amount released"
        assert rows_written()[1:] != rows_before[1:]  # a ledger entry and an event more
        assert ProviderRequest.objects.count() == 0  # nothing was ever sent
        assert_ledger_invariants()

    def test_a_lead_who_asked_is_offered_cancel_not_a_decision(self, django_user_model):
        lead = staff(django_user_model, "lead-asking", "Support leads")
        RefundLimit.objects.create(user=lead, currency="usd", per_refund=100)
        refund = create_refund(
            RefundRequest(charge_id=ChargeFactory(amount=10_000).pk, amount=5_000, actor=lead)
        ).item
        client = verified(Client(), lead)

        page = client.get(page_of(refund)).content.decode()
        done = cancel(client, [refund], post="yes")

        assert f'value="{ACTION}"' in page
        assert "approve_refunds" not in page and "reject_refunds" not in page
        assert done.status_code == 302
        refund.refresh_from_db()
        assert (refund.status, refund.decided_by) == (Refund.Status.CANCELED, "user:lead-asking")

    def test_a_decision_that_went_through_restarts_the_idle_clock(self, agent_client, waiting):
        session = agent_client.session
        almost_stale = session[FRESH_AT] - 4 * 60
        session[FRESH_AT] = almost_stale
        session.save()

        cancel(agent_client, [waiting])  # the confirmation page: nothing canceled
        assert agent_client.session[FRESH_AT] == almost_stale
        done = cancel(agent_client, [waiting], post="yes")

        assert done.status_code == 302
        assert agent_client.session[FRESH_AT] > almost_stale + 200


class TestNobodyElse:
    def test_another_agent_sees_no_button_and_a_forged_post_changes_nothing(
        self, other_agent, waiting
    ):
        client = verified(Client(), other_agent)
        rows_before = rows_written()

        page = client.get(page_of(waiting)).content.decode()
        asked = cancel(client, [waiting])
        forged = cancel(client, [waiting], post="yes")

        assert page.count("decide-link") == 0 and ACTION not in page
        assert "None of the selected refunds is a request of yours awaiting approval." in (
            text_of(asked)
        )
        assert 'value="Yes, cancel' not in asked.content.decode()
        assert told(forged) == [
            "Not canceled, because you did not ask for it (a support lead rejects it instead, "
            f"with a note) (refund_not_cancelable): 1 refund — {waiting.pk} $600.00"
        ]
        assert unchanged(waiting) and waiting.status == Refund.Status.AWAITING_APPROVAL
        assert rows_written() == rows_before
        assert not LogEntry.objects.filter(object_id=waiting.pk).exists()

    def test_a_lead_is_offered_reject_and_the_admin_refuses_their_cancel(self, lead, waiting):
        """cancel_refund lets a lead cancel any waiting refund; the admin does not: a lead
        deciding someone else's request rejects it, with the note Reject requires."""
        client = verified(Client(), lead)
        rows_before = rows_written()

        page = client.get(page_of(waiting)).content.decode()
        forged = cancel(client, [waiting], post="yes")

        assert 'value="reject_refunds"' in page and f'value="{ACTION}"' not in page
        assert forged.status_code == 302
        assert told(forged)[0].startswith("Not canceled, because you did not ask for it")
        assert unchanged(waiting) and waiting.status == Refund.Status.AWAITING_APPROVAL
        assert rows_written() == rows_before

    def test_a_refund_an_api_key_asked_for_is_nobodys_to_cancel_here(self, agent_client):
        key, _ = create_api_key(name="order-service")
        RefundLimit.objects.create(api_key=key, currency="usd", per_refund=100)
        refund = create_refund(
            RefundRequest(
                charge_id=ChargeFactory(amount=10_000).pk,
                amount=5_000,
                actor=f"api_key:{key.prefix}",
            )
        ).item
        assert refund.status == Refund.Status.AWAITING_APPROVAL and refund.created_by_id is None

        page = agent_client.get(page_of(refund)).content.decode()
        forged = cancel(agent_client, [refund], post="yes")

        assert f'value="{ACTION}"' not in page
        assert told(forged)[0].startswith("Not canceled, because you did not ask for it")
        assert unchanged(refund) and refund.status == Refund.Status.AWAITING_APPROVAL


class TestTheGuards:
    def test_without_a_fresh_code_nothing_changes_and_with_one_it_does(
        self, client, support_agent, waiting
    ):
        device_of(support_agent)
        client.force_login(support_agent)
        rows_before = rows_written()

        asked = cancel(client, [waiting], post="yes")

        assert asked.status_code == 302
        assert asked.url.startswith(reverse("verify-second-factor"))
        assert unchanged(waiting) and rows_written() == rows_before
        assert not LogEntry.objects.filter(object_id=waiting.pk).exists()

        verified(client, support_agent)
        done = cancel(client, [waiting], post="yes")

        assert done.status_code == 302
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.CANCELED

    def test_it_is_a_money_action_the_second_factor_walk_reaches(self, admin_user):
        """tests/admin/test_every_write_needs_second_factor.py posts every action that
        get_actions offers a superuser, without a code: this one is among them."""
        model_admin = admin.site._registry[Refund]
        request = RequestFactory().get(REFUNDS)
        request.user = admin_user

        assert ACTION in model_admin.get_actions(request)
        assert isinstance(model_admin, ReadOnlyAdmin)
        assert ACTION in model_admin.money_actions

    def test_a_refund_no_longer_awaiting_approval_is_refused_with_a_message(
        self, agent_client, lead, waiting
    ):
        approve_refund(refund_id=waiting.pk, approver=lead)
        waiting.refresh_from_db()
        status = waiting.status
        rows_before = rows_written()

        page = agent_client.get(page_of(waiting)).content.decode()
        asked = cancel(agent_client, [waiting])
        done = cancel(agent_client, [waiting], post="yes")

        assert f'value="{ACTION}"' not in page
        assert "None of the selected refunds is a request of yours awaiting approval." in (
            text_of(asked)
        )
        assert f"{waiting.pk}: $600.00 (Succeeded by user:lead: no longer awaiting" in (
            text_of(asked)
        )
        assert told(done) == [
            "Not canceled, because it is no longer awaiting approval (refund_not_cancelable): "
            f"1 refund — {waiting.pk} $600.00 ({status} by user:lead)"
        ]
        assert unchanged(waiting) and waiting.status == status
        assert rows_written() == rows_before
        assert Charge.objects.get(pk=waiting.charge_id).amount_refunded == 60_000
