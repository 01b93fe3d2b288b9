"""The comparison's harder cases, with the provider's books written as a test wants them:
a refund pending at the provider that then failed, a payout that failed or is on its way,
a charge booked twice, an explanation whose difference changed since."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine

from ledger_app.books.services import close_books, explain
from ledger_app.models import (
    BalanceTransaction,
    BooksDay,
    BooksDifference,
    Charge,
    Payout,
    Refund,
)
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ledger_invariants")]
DAY = date(2026, 11, 2)
NOON = datetime(2026, 11, 2, 12, tzinfo=UTC)


def moved(bt_id: str, kind: str, source: str, amount: int, *, payout: str = "", **more) -> None:
    BalanceTransaction.objects.create(
        id=bt_id,
        type=kind,
        reporting_category=kind,
        source=source,
        amount=amount,
        fee=more.pop("fee", 0),
        net=amount,
        currency="usd",
        created=NOON,
        available_on=NOON + timedelta(days=1),
        payout=payout,
    )


def paid_out(payout_id: str, status: str) -> None:
    Payout.objects.create(
        id=payout_id, amount=0, currency="usd", arrival_date=NOON, created=NOON, status=status
    )


def close(on: date = DAY + timedelta(days=3)) -> list[tuple]:
    with time_machine.travel(datetime(on.year, on.month, on.day, 23, tzinfo=UTC), tick=False):
        close_books()
    return list(BooksDifference.objects.order_by("reference").values_list("kind", "reference"))


def a_refund(status: str, provider_id: str, *, amount: int = 1_000) -> Refund:
    """A refund as the ledger holds it after the provider's word, made at noon on DAY."""
    from ledger_app.refunds.services import RefundRequest, create_refund

    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": status})
    with time_machine.travel(NOON, tick=False):
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=amount)).item
    Refund.objects.filter(pk=refund.pk).update(provider_refund_id=provider_id)
    return refund


@pytest.fixture(autouse=True)
def inline(settings):
    settings.REFUND_DISPATCH = "inline"


class TestThePayout:
    def test_on_its_way_the_day_waits_once_paid_it_closes(self):
        refund = a_refund("succeed", "re_p1")
        moved("txn_1", "refund", "re_p1", -1_000, payout="po_1")
        paid_out("po_1", "in_transit")

        assert close() == [] and BooksDay.objects.get().status == "waiting"

        Payout.objects.filter(pk="po_1").update(status="paid")
        assert close() == [] and BooksDay.objects.get().status == "closed"
        assert Refund.objects.get(pk=refund.pk).balance_transaction == "txn_1"

    def test_a_payout_that_failed_paid_nothing_out(self):
        refund = a_refund("succeed", "re_p2")
        moved("txn_2", "refund", "re_p2", -1_000, payout="po_2")
        paid_out("po_2", "failed")

        assert close() == [("not_paid_out", f"refund {refund.pk}")]
        assert BooksDifference.objects.get().detail == "its payout po_2 failed"


class TestWhatTheLedgerNeverMoved:
    def test_a_refund_pending_there_then_failed_nets_to_nothing(self):
        refund = a_refund("decline", "re_p3")
        assert refund.status == "failed"
        moved("txn_3", "refund", "re_p3", -1_000, payout="po_3")
        moved("txn_4", "refund_failure", "re_p3", 1_000, payout="po_3")
        paid_out("po_3", "paid")

        assert close() == []

    def test_but_a_debit_alone_for_it_is_money_the_ledger_never_moved(self):
        a_refund("decline", "re_p4")
        moved("txn_5", "refund", "re_p4", -1_000, payout="po_4")
        paid_out("po_4", "paid")

        assert close() == [("missing_in_ledger", "balance transaction txn_5")]

    def test_a_refund_from_before_the_books_began_accounts_for_its_debit(self):
        refund = a_refund("succeed", "re_p8")
        Refund.objects.filter(pk=refund.pk).update(created_at=NOON - timedelta(days=1))
        moved("txn_13", "refund", "re_p8", -1_000, payout="po_9")  # the books begin here
        paid_out("po_9", "paid")

        assert close() == []

    def test_a_second_debit_of_a_matched_refund_is_found(self):
        a_refund("succeed", "re_p5")
        moved("txn_6", "refund", "re_p5", -1_000, payout="po_5")
        moved("txn_7", "refund", "re_p5", -1_000, payout="po_5")
        paid_out("po_5", "paid")

        found = close()

        assert len(found) == 1 and found[0][0] == "missing_in_ledger"

    def test_a_charge_booked_twice_is_found(self):
        charge = ChargeFactory(amount=5_000, provider_charge_id="ch_there_1")
        Charge.objects.filter(pk=charge.pk).update(created_at=NOON)
        moved("txn_8", "charge", "ch_there_1", 5_000, payout="po_6")
        moved("txn_9", "charge", "ch_there_1", 5_000, payout="po_6")
        paid_out("po_6", "paid")

        assert close() == [
            ("missing_in_ledger", "balance transaction txn_8"),
            ("missing_in_ledger", "balance transaction txn_9"),
        ]


class TestAnExplanation:
    def test_it_holds_until_the_difference_changes(self):
        refund = a_refund("succeed", "re_p6")
        moved("txn_10", "refund", "re_p6", -999, payout="po_7")
        paid_out("po_7", "paid")
        assert close() == [("amount_differs", f"refund {refund.pk}")]
        explain(BooksDifference.objects.get().pk, note="One cent kept by the bank.", actor="lead")
        assert BooksDay.objects.get().status == "closed"

        BalanceTransaction.objects.filter(pk="txn_10").update(amount=-900)
        close()

        row = BooksDifference.objects.get()
        assert (row.explained_at, row.explanation) == (None, "")
        assert BooksDay.objects.get().status == "open"


class TestWhichDaysAreClosedAgain:
    def test_a_settled_closed_day_only_when_the_provider_lists_something_new_of_it(self):
        a_refund("succeed", "re_p7")
        with time_machine.travel(NOON, tick=False):  # fetched that day
            moved("txn_11", "refund", "re_p7", -1_000, payout="po_8")
            paid_out("po_8", "paid")
        assert close() == [] and BooksDay.objects.get().status == "closed"
        checked = BooksDay.objects.get().checked_at

        close(DAY + timedelta(days=20))
        assert BooksDay.objects.get().checked_at == checked  # settled: not compared again

        moved("txn_12", "adjustment", "", -300)  # fetched now: a back-fill found it
        assert close(DAY + timedelta(days=21)) == [
            ("missing_in_ledger", "balance transaction txn_12")
        ]
        assert BooksDay.objects.get().status == "open"
