"""What the provider says of money is outside input: a dispute's balance transactions (by
webhook or listed by sync_provider), and the balance transactions and payouts sync_provider
lists. Each hostile form is refused where it comes in (ledger_app/mirror/events_in.py,
ledger_app/mirror/books_in.py), written nowhere, and a good one beside it still applies."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger_app import errors
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import (
    BalanceTransaction,
    Charge,
    Dispute,
    Event,
    LedgerEntry,
    Payout,
    Refund,
)
from ledger_app.provider.gateways.simulated import SimulatedGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.provider_webhook import event_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ledger_invariants")]
NOW = int(datetime(2026, 11, 2, 12, tzinfo=UTC).timestamp())


def withdrawal(**changed: Any) -> dict[str, Any]:
    return {
        "id": "txn_dispute_1",
        "object": "balance_transaction",
        "amount": -5_000,
        "fee": 1_500,
        "currency": "usd",
        "created": NOW,
        **changed,
    }


def dispute(charge, *moves: dict[str, Any], **changed: Any) -> dict[str, Any]:
    return {
        "id": "dp_hostile_1",
        "object": "dispute",
        "charge": charge.provider_reference,
        "amount": charge.amount,
        "currency": charge.currency,
        "status": "needs_response",
        "reason": "fraudulent",
        "is_charge_refundable": False,
        "balance_transactions": list(moves),
        **changed,
    }


HOSTILE_MONEY: dict[str, dict[str, Any]] = {
    "not a list": {"balance_transactions": {"id": "txn_1"}},
    "three of them": {"balance_transactions": [withdrawal(id=f"txn_{n}") for n in range(3)]},
    "more than disputed": {"balance_transactions": [withdrawal(amount=-5_001)]},
    "nothing moved": {"balance_transactions": [withdrawal(amount=0)]},
    "a float": {"balance_transactions": [withdrawal(amount=-50.0)]},
    "a text amount": {"balance_transactions": [withdrawal(amount="-5000")]},
    "a negative fee": {"balance_transactions": [withdrawal(fee=-1_500)]},
    "a fee past any fee": {"balance_transactions": [withdrawal(fee=10**12)]},
    "another currency": {"balance_transactions": [withdrawal(currency="eur")]},
    "an id with a NUL": {"balance_transactions": [withdrawal(id="txn_\x00")]},
    "an id too long": {"balance_transactions": [withdrawal(id="txn_" + "a" * 300)]},
    "no id": {"balance_transactions": [{**withdrawal(), "id": None}]},
    "a time that is text": {"balance_transactions": [withdrawal(created="yesterday")]},
}


class TestADisputesMoney:
    @pytest.mark.parametrize("form", sorted(HOSTILE_MONEY))
    def test_a_hostile_form_books_no_money_and_the_dispute_still_stops_refunds(self, form):
        charge = ChargeFactory(amount=5_000)

        said = apply_provider_event(
            event_of(
                "evt_hostile_1", "charge.dispute.created", dispute(charge, **HOSTILE_MONEY[form])
            )
        )

        assert "its money not booked" in said, said
        assert not LedgerEntry.objects.filter(kind__startswith="dispute_").exists()
        assert Dispute.objects.get().balance_transactions == []
        charge.refresh_from_db()
        assert (charge.dispute_id, charge.dispute_status) == ("dp_hostile_1", "needs_response")
        assert charge.refund_blocker == "charge_disputed"
        told = Event.objects.filter(type__startswith="charge.dispute.").values_list(
            "type", flat=True
        )
        assert list(told) == ["charge.dispute.created"]

    def test_the_good_form_is_booked_once_however_often_it_is_told(self):
        charge = ChargeFactory(amount=5_000)
        told = dispute(charge, withdrawal())

        for n in range(3):
            apply_provider_event(event_of(f"evt_told_{n}", "charge.dispute.updated", told))
        won = dispute(
            charge, withdrawal(), withdrawal(id="txn_back", amount=5_000, fee=0), status="won"
        )
        apply_provider_event(event_of("evt_won", "charge.dispute.closed", won))
        apply_provider_event(event_of("evt_won_again", "charge.dispute.closed", won))

        moved = LedgerEntry.objects.filter(charge=charge, kind__startswith="dispute_")
        assert sorted(moved.values_list("kind", "amount", "balance_transaction")) == [
            ("dispute_fee", 1_500, "txn_dispute_1"),
            ("dispute_reinstated", 5_000, "txn_back"),
            ("dispute_withdrawn", 5_000, "txn_dispute_1"),
        ]

    def test_a_second_withdrawal_under_another_id_is_not_booked(self):
        charge = ChargeFactory(amount=5_000)
        apply_provider_event(
            event_of("evt_1", "charge.dispute.created", dispute(charge, withdrawal()))
        )

        again = dispute(charge, withdrawal(id="txn_other"))
        apply_provider_event(event_of("evt_2", "charge.dispute.updated", again))

        assert LedgerEntry.objects.filter(kind="dispute_withdrawn").count() == 1

    def test_a_reinstatement_of_nothing_withdrawn_is_not_booked(self):
        charge = ChargeFactory(amount=5_000)
        back = withdrawal(id="txn_back", amount=5_000, fee=0)

        apply_provider_event(
            event_of("evt_1", "charge.dispute.closed", dispute(charge, back, status="won"))
        )

        assert not LedgerEntry.objects.filter(kind__startswith="dispute_").exists()
        assert Dispute.objects.get().status == "won"


def listed(kind: str, **changed: Any) -> dict[str, Any]:
    now = int(timezone.now().timestamp())
    if kind == "payout":
        return {
            "id": "po_listed_1",
            "object": "payout",
            "amount": 1_000,
            "currency": "usd",
            "arrival_date": now,
            "created": now,
            "status": "paid",
            **changed,
        }
    return {
        "id": "txn_listed_1",
        "object": "balance_transaction",
        "type": "charge",
        "reporting_category": "charge",
        "source": "ch_listed_1",
        "amount": 1_000,
        "fee": 59,
        "net": 941,
        "currency": "usd",
        "created": now,
        "available_on": now,
        "status": "available",
        **changed,
    }


class Listing(SimulatedGateway):
    """The simulated provider's lists, with one hostile object in each."""

    def __init__(self, hostile: dict[str, dict[str, Any]]) -> None:
        self.hostile = hostile
        self.given: set[str] = set()

    def list_created(self, kind, *, start, end):
        if kind not in self.hostile or kind in self.given:
            return []
        self.given.add(kind)  # in the first window it is asked about
        return [copy.deepcopy(self.hostile[kind]), listed(kind)]

    def list_paid_out(self, payout_id):
        return [listed("balance_transaction", id="txn_paid_1")]


HOSTILE_LISTED: dict[str, tuple[str, dict[str, Any]]] = {
    "a float amount": ("balance_transaction", {"amount": 10.5}),
    "an amount past a bigint": ("balance_transaction", {"amount": 2**63}),
    "a NUL in the id": ("balance_transaction", {"id": "txn_\x00"}),
    "a source that is no id": ("balance_transaction", {"source": "ch_1; DROP TABLE"}),
    "a currency of four letters": ("balance_transaction", {"currency": "usdd"}),
    "no time": ("balance_transaction", {"created": None}),
    "a type that is no word": ("balance_transaction", {"type": "<script>"}),
    "a type past its column": ("balance_transaction", {"type": "adjustment" * 10}),
    "a payout of text": ("payout", {"amount": "1000"}),
    "a payout id too long": ("payout", {"id": "po_" + "x" * 300}),
    "a payout arriving never": ("payout", {"arrival_date": -1}),
}


@pytest.mark.parametrize("form", sorted(HOSTILE_LISTED))
def test_a_hostile_listed_object_is_kept_nowhere_and_the_good_one_is(form):
    kind, changed = HOSTILE_LISTED[form]
    hostile = {kind: {**listed(kind), **changed, "id": changed.get("id", f"{kind[:3]}_bad")}}

    report = sync_provider(since=timezone.now() - timedelta(hours=1), gateway=Listing(hostile))

    assert report is not None and report.ignored >= 1
    kept = set(BalanceTransaction.objects.values_list("pk", flat=True))
    if kind == "balance_transaction":
        assert kept == {"txn_listed_1"}
    else:
        assert set(Payout.objects.values_list("pk", flat=True)) == {"po_listed_1"}
        assert kept == {"txn_paid_1"}
        assert BalanceTransaction.objects.get().payout == "po_listed_1"


class TestWhatStopsARefund:
    def test_a_replayed_inquiry_after_the_money_left_does_not_allow_refunds(self):
        charge = ChargeFactory(amount=5_000)
        inquiry = dispute(charge, status="warning_needs_response", is_charge_refundable=True)
        apply_provider_event(event_of("evt_1", "charge.dispute.created", inquiry))
        assert Charge.objects.get(pk=charge.pk).refund_blocker is None  # an inquiry: allowed

        opened = dispute(charge, withdrawal(), status="needs_response")
        apply_provider_event(event_of("evt_2", "charge.dispute.updated", opened))
        replayed = {**inquiry, "balance_transactions": [withdrawal()]}
        apply_provider_event(event_of("evt_3", "charge.dispute.updated", replayed))

        assert Charge.objects.get(pk=charge.pk).refund_blocker == "charge_disputed"
        with pytest.raises(errors.ChargeDisputed):
            create_refund(RefundRequest(charge_id=charge.pk, amount=100))

    def test_a_lost_dispute_was_charged_back_and_refunds_stay_refused(self):
        charge = ChargeFactory(amount=5_000)
        lost = dispute(charge, withdrawal(), status="lost")

        apply_provider_event(event_of("evt_1", "charge.dispute.closed", lost))

        with pytest.raises(errors.ChargeDisputed, match="charged back"):
            create_refund(RefundRequest(charge_id=charge.pk, amount=100))
        assert not Refund.objects.exists()

    def test_a_dispute_id_of_another_charge_is_not_moved_onto_this_one(self):
        first, second = ChargeFactory(amount=5_000), ChargeFactory(amount=5_000)
        apply_provider_event(
            event_of("evt_1", "charge.dispute.created", dispute(first, withdrawal()))
        )

        said = apply_provider_event(
            event_of("evt_2", "charge.dispute.created", dispute(second, withdrawal(id="txn_2")))
        )

        assert said.startswith("ignored:") and "another charge" in said
        assert Dispute.objects.get().charge_id == first.pk
        assert not LedgerEntry.objects.filter(charge=second, kind__startswith="dispute_").exists()
        assert Charge.objects.get(pk=second.pk).dispute_id == ""

    def test_a_balance_transaction_booked_on_another_charge_is_not_booked_again(self):
        first, second = ChargeFactory(amount=5_000), ChargeFactory(amount=5_000)
        apply_provider_event(
            event_of("evt_1", "charge.dispute.created", dispute(first, withdrawal()))
        )

        told = dispute(second, withdrawal(), id="dp_second")
        said = apply_provider_event(event_of("evt_2", "charge.dispute.created", told))

        assert not said.startswith("ignored:")  # the dispute is kept: it stops refunds
        assert LedgerEntry.objects.filter(balance_transaction="txn_dispute_1").count() == 2
        assert not LedgerEntry.objects.filter(charge=second, kind__startswith="dispute_").exists()
