"""Each fault the provider's books can hold is found by close_books on the day it happens,
by kind, keeps that day open (and verify_ledger --provider failing) until a lead explains
it, and is found the same way however often the books are closed."""

from __future__ import annotations

import io
from datetime import date, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger_app import errors
from ledger_app.books.services import close_books, explain
from ledger_app.charges.services import create_charge
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import BalanceTransaction, BooksDay, BooksDifference, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import books
from tests.books_month import at

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]
DAY = date(2026, 11, 2)


def a_refund(amount: int = 2_000, **metadata: str) -> Refund:
    charge = create_charge(amount=10_000, currency="usd", metadata=metadata).item
    return create_refund(RefundRequest(charge_id=charge.pk, amount=amount)).item


def end_of(day: date, traveller) -> None:
    traveller.move_to(at(day, 23))
    sync_provider(since=at(DAY, 0))
    close_books()


def differences() -> list[tuple]:
    rows = BooksDifference.objects.order_by("kind", "reference")
    return list(rows.values_list("day", "kind", "refund_id", "ledger_amount", "provider_amount"))


def status(day: date = DAY) -> str:
    return BooksDay.objects.get(day=day, currency="usd").status


def verify_provider() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("verify_ledger", "--provider", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def traveller():
    with time_machine.travel(at(DAY, 9), tick=False) as moving:
        yield moving


class TestThePlantedFaults:
    def test_a_refund_booked_for_another_amount_is_found_that_day(self, traveller):
        good, short = a_refund(), a_refund(3_000, simulate_books="refund_other_amount")

        end_of(DAY, traveller)

        assert differences() == [(DAY, "amount_differs", short.pk, -3_000, -2_999)]
        assert status() == "open"
        day = BooksDay.objects.get(day=DAY)
        assert (day.refunded, day.matched, day.differences) == (5_000, 0, {"amount_differs": 1})
        assert good.pk not in {row[2] for row in differences()}

    def test_a_refund_the_provider_dropped_is_found_that_day(self, traveller):
        dropped = a_refund(simulate_books="refund_dropped")

        end_of(DAY, traveller)

        assert differences() == [(DAY, "missing_at_provider", dropped.pk, -2_000, None)]
        assert status() == "open"
        assert Refund.objects.get(pk=dropped.pk).balance_transaction == ""

    def test_a_balance_transaction_the_ledger_never_made_is_found_that_day(self, traveller):
        a_refund()
        stray = books.stray_adjustment(amount=-700, currency="usd")

        end_of(DAY, traveller)

        assert differences() == [(DAY, "missing_in_ledger", None, None, -700)]
        assert BooksDifference.objects.get().balance_transaction == stray.provider_id

    def test_matched_but_never_paid_out_is_found_after_its_payout_day(self, traveller):
        refund = a_refund()
        end_of(DAY, traveller)
        assert status() == "waiting"  # matched; its payout is due in two days

        # The provider's payouts stop: two days on, it is still in none.
        BalanceTransaction.objects.filter(source=refund.provider_refund_id).update(payout="")
        traveller.move_to(at(DAY + timedelta(days=3), 23))
        close_books()

        assert differences() == [(DAY, "not_paid_out", refund.pk, -2_000, -2_000)]
        assert status() == "open"


class TestALeadExplains:
    def test_the_day_stays_open_until_every_difference_is_explained(self, traveller):
        a_refund(simulate_books="refund_dropped")
        books.stray_adjustment(amount=-700, currency="usd")
        end_of(DAY, traveller)
        first, second = BooksDifference.objects.order_by("kind")
        assert verify_provider()[0] == 0  # today's: verify looks at the days before today

        traveller.move_to(at(DAY + timedelta(days=1), 9))
        code, said = verify_provider()
        assert code == 1 and "missing_at_provider" in said and "missing_in_ledger" in said
        with pytest.raises(CommandError) as closing:
            call_command("close_books", stdout=io.StringIO())
        assert closing.value.returncode == 1

        with pytest.raises(errors.InvalidNote):
            explain(first.pk, note="  ", actor="lead")
        explain(first.pk, note="Refunded by cheque, not through the provider.", actor="lead")
        assert status() == "open"
        explain(second.pk, note="The provider's correction, ticket 4411.", actor="lead")

        assert status() == "closed"
        assert verify_provider()[0] == 0
        day = BooksDay.objects.get(day=DAY)
        assert day.matched == day.refunded == 2_000 and day.differences == {}
        explained = BooksDifference.objects.get(pk=first.pk)
        assert (explained.explained_by, explained.explanation) == (
            "lead",
            "Refunded by cheque, not through the provider.",
        )

    def test_closing_again_finds_the_same_and_keeps_the_explanation(self, traveller):
        a_refund(simulate_books="refund_dropped")
        end_of(DAY, traveller)
        (found,) = BooksDifference.objects.all()
        explain(found.pk, note="Known to the provider's support.", actor="lead")

        for later in range(1, 4):
            end_of(DAY + timedelta(days=later), traveller)

        (kept,) = BooksDifference.objects.all()
        assert (kept.pk, kept.still_there, kept.explained_by) == (found.pk, True, "lead")
        assert status() == "closed"


class TestTheWorkersDailyClose:
    def test_it_closes_after_a_sync_once_a_day(self, traveller, settings):
        from ledger_app.management.commands.process_refunds import Command as ProcessRefunds
        from ledger_app.models import JobLease

        settings.PROVIDER_SYNC_INTERVAL = 3600
        dropped = a_refund(simulate_books="refund_dropped")
        sync_provider(since=at(DAY, 0))  # the books begin: the first sync's back-fill
        out = io.StringIO()
        worker = ProcessRefunds(stdout=out)

        traveller.move_to(at(DAY, 12))
        worker._sync_if_due()
        traveller.move_to(at(DAY, 14))  # the sync is due again, the close is not
        a_refund(simulate_books="refund_dropped")
        worker._sync_if_due()

        said = out.getvalue()
        assert said.count("sync_provider: read") == 2
        assert said.count("close_books: ") == 1 and f"{DAY} usd: open" in said
        assert [row[2] for row in differences()] == [dropped.pk]  # the second waits a day
        assert JobLease.objects.get(pk="close_books").last_finished_at == at(DAY, 12)

        traveller.move_to(at(DAY + timedelta(days=1), 12))
        worker._sync_if_due()
        assert len(differences()) == 2
