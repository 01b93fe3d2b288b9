"""Working the needs-attention queue to empty: declines are marked handled with a note,
only by someone who may refund; resends and lookups are offered only where they mean
something, and a refund someone else is sending is left alone."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from ledger_app import errors
from ledger_app.approvals.attention import mark_refund_handled
from ledger_app.models import Refund
from ledger_app.refunds.selectors import needing_attention
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import books

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

ATTENTION = "admin:ledger_app_refundattention_changelist"


def refund_that(behaviour: str, amount: int = 300) -> Refund:
    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": behaviour})
    return create_refund(RefundRequest(charge_id=charge.pk, amount=amount)).item


def act(client, action: str, refunds, **extra):
    return client.post(
        reverse(ATTENTION),
        {"action": action, "_selected_action": [r.pk for r in refunds], **extra},
        follow=True,
    )


def shown(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def in_queue(refund: Refund) -> bool:
    return Refund.objects.filter(needing_attention(), pk=refund.pk).exists()


class TestMarkHandled:
    def test_a_declined_refund_leaves_the_queue_with_the_note_and_who_did_it(
        self, agent_client, support_agent
    ):
        declined = refund_that("decline")
        before = books(declined.charge)
        assert declined.status == "failed" and in_queue(declined)

        confirm = act(agent_client, "mark_handled", [declined])
        done = act(
            agent_client, "mark_handled", [declined], post="yes", note="Paid back by bank transfer"
        )

        assert "Marking them handled takes them off this queue" in confirm.content.decode()
        declined.refresh_from_db()
        assert declined.handled_by == "user:agent"
        assert declined.handled_note == "Paid back by bank transfer"
        assert declined.handled_at is not None
        assert not in_queue(declined)
        assert declined.pk not in agent_client.get(reverse(ATTENTION)).content.decode()
        assert f"Marked handled: 1 refund — {declined.pk}" in shown(done)
        [entry] = LogEntry.objects.filter(object_id=declined.pk)
        assert entry.user == support_agent and "Paid back by bank transfer" in entry.change_message
        assert books(declined.charge) == before  # no money moves

    def test_without_a_note_nothing_is_marked(self, agent_client):
        declined = refund_that("decline")

        page = act(agent_client, "mark_handled", [declined], post="yes", note="  ")

        assert "note_required" in page.content.decode()
        declined.refresh_from_db()
        assert declined.handled_at is None and in_queue(declined)

    def test_money_in_doubt_cannot_be_marked_handled(self, agent_client):
        unknown = refund_that("timeout")
        declined = refund_that("decline")

        done = act(agent_client, "mark_handled", [unknown, declined], post="yes", note="checked")

        unknown.refresh_from_db()
        assert unknown.status == "unknown" and unknown.handled_at is None and in_queue(unknown)
        assert f"{unknown.pk} (unknown)" in shown(done)
        assert not in_queue(declined)
        with pytest.raises(errors.RefundNotDeclined):
            mark_refund_handled(refund_id=unknown.pk, note="x", actor="cli:ops")
        with pytest.raises(IntegrityError), transaction.atomic():
            Refund.objects.filter(pk=unknown.pk).update(handled_at=timezone.now())

    def test_staff_without_the_refund_permission_cannot_mark_handled(self, viewer_client):
        declined = refund_that("decline")

        viewer_client.post(
            reverse(ATTENTION),
            {
                "action": "mark_handled",
                "_selected_action": [declined.pk],
                "post": "yes",
                "note": "x",
            },
        )

        declined.refresh_from_db()
        assert declined.handled_at is None


class TestResendsOnlyWhereMeaningful:
    def test_declines_are_not_resent_or_asked_about(self, agent_client):
        declined = refund_that("decline")
        requests = ProviderRequest.objects.count()

        retry = act(agent_client, "retry_dispatch", [declined])
        ask = act(agent_client, "reconcile_now", [declined])

        assert ProviderRequest.objects.count() == requests
        assert "already declined them" in shown(retry) and "already declined them" in shown(ask)
        declined.refresh_from_db()
        assert declined.status == "failed"

    def test_the_actions_offered_follow_the_status_shown(self, agent_client):
        refund_that("decline")

        declines = agent_client.get(reverse(ATTENTION) + "?status__exact=failed").content
        in_doubt = agent_client.get(reverse(ATTENTION) + "?status__exact=unknown").content

        assert b'value="mark_handled"' in declines
        assert b'value="retry_dispatch"' not in declines
        assert b'value="reconcile_now"' not in declines
        assert b'value="retry_dispatch"' in in_doubt and b'value="mark_handled"' not in in_doubt

    def test_a_refund_another_process_is_asking_about_is_left_alone(self, agent_client):
        refund = refund_that("timeout")  # unknown: always in the queue
        Refund.objects.filter(pk=refund.pk).update(
            leased_until=timezone.now() + timedelta(minutes=5)  # a reconciler holds it
        )
        requests = ProviderRequest.objects.count()
        attempts = Refund.objects.get(pk=refund.pk).dispatch_attempts

        response = act(agent_client, "retry_dispatch", [refund])

        assert "another process is sending it right now" in shown(response)
        assert ProviderRequest.objects.count() == requests
        refund.refresh_from_db()
        assert (refund.status, refund.dispatch_attempts) == ("unknown", attempts)
        assert not LogEntry.objects.filter(object_id=refund.pk).exists()
