"""A succeeded card refund's reference (ARN) is recorded where the back office already asks
the provider about a refund after the fact: the reconciler's re-check and the provider's
webhooks (and the first answer, when it carries one). Under the refund's lock, once: a
different reference later is logged and never replaces it. Recording it moves no money,
writes no ledger entry and leaves `updated_at` (when the refund was last settled) as it
was; a `refund.updated` event tells of the new destination_details, as Stripe's does."""

from __future__ import annotations

import io
import logging
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ledger_app import faults
from ledger_app.mirror import events_in as provider_events
from ledger_app.models import Event, LedgerEntry, ProviderEvent, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.card_network import acquirer_reference
from simulated_provider.models import ProviderRefund
from tests.concurrency import run_at_once
from tests.factories import ChargeFactory
from tests.provider_webhook import SECRET, event_of, post_event, refund_object

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]

ARN = "74987654321012345678901"
OTHER_ARN = "24492156789012345678905"


@pytest.fixture(autouse=True)
def _provider(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    settings.SIMULATED_ARN_DELAY_SECONDS = 60


@pytest.fixture
def succeeded_refund(db) -> Refund:
    refund = create_refund(
        RefundRequest(charge_id=ChargeFactory(amount=5_000).id, amount=1_200)
    ).item
    assert refund.status == Refund.Status.SUCCEEDED and refund.destination_reference == ""
    return refund


def network_gave_it(refund: Refund) -> str:
    """Step the simulated provider's clock past the delay; the ARN it now gives."""
    record = ProviderRefund.objects.get(idempotency_key=refund.provider_idempotency_key)
    record.created_at = timezone.now() - timedelta(seconds=61)
    record.save(update_fields=["created_at"])
    return acquirer_reference(record)


def state(refund: Refund) -> tuple:
    """What recording a reference may change, and what it must not."""
    refund.refresh_from_db()
    return (
        refund.destination_reference,
        refund.status,
        refund.updated_at,
        LedgerEntry.objects.filter(refund=refund).count(),
        Event.objects.filter(refund=refund).count(),
    )


def reconcile() -> str:
    out = io.StringIO()
    call_command("reconcile", stdout=out)
    return out.getvalue()


class TestTheReconcilersRecheck:
    def test_none_before_the_network_gives_it_then_recorded_once(self, succeeded_refund):
        before = state(succeeded_refund)
        reconcile()
        assert state(succeeded_refund) == before  # the network has not given it yet

        arn = network_gave_it(succeeded_refund)
        reconcile()

        told = (arn, *before[1:4], before[4] + 1)  # and one refund.updated, as Stripe's
        assert state(succeeded_refund) == told
        reconcile()
        assert state(succeeded_refund) == told
        event = Event.objects.filter(refund=succeeded_refund).latest("created_at")
        assert event.type == "refund.updated"
        assert event.data_object["destination_details"]["card"]["reference"] == arn
        assert event.previous_attributes == {
            "destination_details": {
                "card": {
                    "reference_status": "pending",
                    "reference_type": "acquirer_reference_number",
                    "type": "refund",
                },
                "type": "card",
            }
        }

    def test_a_different_reference_later_never_replaces_it(self, succeeded_refund, caplog):
        Refund.objects.filter(pk=succeeded_refund.pk).update(destination_reference=OTHER_ARN)
        arn = network_gave_it(succeeded_refund)

        with caplog.at_level(logging.WARNING, logger="ledger_app.dispatch"):
            reconcile()

        assert state(succeeded_refund)[0] == OTHER_ARN
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(arn in line and OTHER_ARN in line for line in warned), warned

    def test_outside_the_recheck_window_it_is_not_asked(self, succeeded_refund, settings):
        network_gave_it(succeeded_refund)
        settings.RECONCILE_RECHECK_HOURS = 1
        Refund.objects.filter(pk=succeeded_refund.pk).update(
            updated_at=timezone.now() - timedelta(hours=2)
        )

        reconcile()

        assert state(succeeded_refund)[0] == ""

    def test_a_declined_refund_gets_none(self, db):
        charge = ChargeFactory(metadata={"simulate_refund": "decline"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
        network_gave_it(refund)

        reconcile()

        assert state(refund)[:2] == ("", Refund.Status.FAILED)

    def test_an_answer_that_carries_it_records_it_with_the_settle(self, db, settings):
        settings.SIMULATED_ARN_DELAY_SECONDS = 0

        refund = create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100)).item

        record = ProviderRefund.objects.get()
        assert state(refund)[:2] == (acquirer_reference(record), Refund.Status.SUCCEEDED)

    def test_an_unknown_refund_settled_by_a_lookup_takes_it_too(self, db):
        charge = ChargeFactory(metadata={"simulate_refund": "apply_then_timeout"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
        assert refund.status == Refund.Status.UNKNOWN
        arn = network_gave_it(refund)

        reconcile()

        assert state(refund)[:2] == (arn, Refund.Status.SUCCEEDED)


def reference_event(refund: Refund, details: object, *, event_id: str, status="succeeded"):
    obj = refund_object(refund, status, destination_details=details)
    return event_of(event_id, "refund.updated", obj)


def card(reference: object) -> dict:
    return {"type": "card", "card": {"reference": reference, "reference_status": "available"}}


class TestTheProvidersWebhooks:
    def test_refund_updated_with_the_reference_records_it(self, client, succeeded_refund):
        before = state(succeeded_refund)

        answer = post_event(client, reference_event(succeeded_refund, card(ARN), event_id="evt_1"))

        assert answer.status_code == 200
        assert state(succeeded_refund) == (ARN, *before[1:4], before[4] + 1)  # refund.updated
        assert ProviderEvent.objects.get(pk="evt_1").outcome.endswith("card reference recorded")

    def test_charge_refund_updated_records_it_too(self, client, succeeded_refund):
        obj = refund_object(succeeded_refund, "succeeded", destination_details=card(ARN))

        post_event(client, event_of("evt_1", "charge.refund.updated", obj))

        assert state(succeeded_refund)[0] == ARN

    def test_a_later_different_reference_is_logged_and_not_kept(
        self, client, succeeded_refund, caplog
    ):
        post_event(client, reference_event(succeeded_refund, card(ARN), event_id="evt_1"))

        with caplog.at_level(logging.WARNING, logger="ledger_app.dispatch"):
            answer = post_event(
                client, reference_event(succeeded_refund, card(OTHER_ARN), event_id="evt_2")
            )

        assert answer.status_code == 200
        assert state(succeeded_refund)[0] == ARN
        assert any(OTHER_ARN in record.getMessage() for record in caplog.records)

    @pytest.mark.parametrize(
        "details",
        [
            card("7" * 65),
            card("7498\n7654"),
            card("7498\x007654"),
            card("७४९८७६५४"),
            card(74987654321012345678901),
            card({"$ne": ""}),
            card(None),
            {"type": "sepa_debit", "card": {"reference": ARN}},
            "card",
            [card(ARN)],
            None,
        ],
    )
    def test_a_hostile_reference_is_ignored_and_the_event_still_applied(
        self, client, succeeded_refund, details
    ):
        before = state(succeeded_refund)

        answer = post_event(client, reference_event(succeeded_refund, details, event_id="evt_1"))

        assert answer.status_code == 200
        assert state(succeeded_refund) == before
        assert ProviderEvent.objects.filter(pk="evt_1").exists()

    def test_an_unknown_refund_settles_and_takes_it_in_one_go(self, client, db):
        charge = ChargeFactory(metadata={"simulate_refund": "timeout"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
        assert refund.status == Refund.Status.UNKNOWN

        post_event(client, reference_event(refund, card(ARN), event_id="evt_1"))

        assert state(refund)[:2] == (ARN, Refund.Status.SUCCEEDED)

    def test_a_refund_that_failed_takes_none(self, client, succeeded_refund):
        post_event(
            client, reference_event(succeeded_refund, None, event_id="evt_1", status="failed")
        )

        post_event(client, reference_event(succeeded_refund, card(ARN), event_id="evt_2"))

        assert state(succeeded_refund)[:2] == ("", Refund.Status.FAILED)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_words_at_once_record_one_reference_under_the_refunds_lock(monkeypatch):
    """Two webhooks with different references at once: the first holds the refund's lock
    (paused inside the settle); the second waits for it, then finds the reference there
    and keeps it. Without the lock both would read none and both say they recorded one."""
    refund = create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100)).item
    paused = threading.Event()

    def pause_the_first(point: str) -> None:
        if point == "refund.settle_locked" and not paused.is_set():
            paused.set()
            time.sleep(0.5)  # the lock is held; the other word arrives meanwhile

    monkeypatch.setattr(faults, "checkpoint", pause_the_first)

    def word(reference: str, event_id: str, wait: float):
        def apply() -> str:
            time.sleep(wait)
            return provider_events.apply_provider_event(
                reference_event(refund, card(reference), event_id=event_id)
            )

        return apply

    first, second = run_at_once([word(ARN, "evt_1", 0), word(OTHER_ARN, "evt_2", 0.2)])

    assert first.endswith("card reference recorded"), first
    assert not second.endswith("card reference recorded"), second
    assert state(refund)[:2] == (ARN, Refund.Status.SUCCEEDED)
