"""A simulated month of money at the simulated provider and in the ledger, for the books'
tests: charges made here and at the provider's checkout, our refunds, refunds made in the
provider's dashboard, a refund that fails days after it succeeded, a dispute won and one
lost, an inquiry refunded while open; the provider's fees, and its payouts two days later.
Every day ends as the worker ends it: sync_provider, then close_books. Its webhooks about
what the provider did itself are lost (sync_provider finds them); those about our own
refunds and disputes are delivered."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import time_machine
from django.test import override_settings

from ledger_app.books.services import close_books
from ledger_app.charges.services import create_charge
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import Charge
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from simulated_provider.dashboard import refund_from_dashboard, take_payment

FIRST_DAY = date(2026, 10, 1)
DAYS = 30


def at(day: date, hour: int) -> datetime:
    return datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def tell(events: list[dict]) -> list[str]:
    return [apply_provider_event(event) for event in events]


def dispute(charge: Charge, status: str) -> list[str]:
    return tell(
        news.dispute_news(
            charge_reference=charge.provider_reference,
            amount=charge.amount,
            currency=charge.currency,
            status=status,
        )
    )


def end_of_day(traveller, day: date) -> None:
    """What the worker does late each day: catch up with the provider, close the books."""
    traveller.move_to(at(day, 23))
    sync_provider(since=at(FIRST_DAY, 0) if day == FIRST_DAY else None)
    close_books()


def charge_here(amount: int, **metadata: str) -> Charge:
    return create_charge(amount=amount, currency="usd", metadata=metadata).item


def refund(charge: Charge, amount: int | None = None) -> None:
    create_refund(RefundRequest(charge_id=charge.pk, amount=amount))


def known(provider_charge_id: str) -> Charge:
    return Charge.objects.get(pk=provider_charge_id)


def live_a_month(days: int = DAYS, *, then: int = 0, each_day=None) -> dict[str, Charge]:
    """The month, then `then` quiet days (payouts land); `each_day(traveller, day, n)`
    runs after each busy day's own work. The charges the story names, by role."""
    roles: dict[str, Charge] = {}
    with (
        override_settings(PROVIDER_SYNC_INTERVAL=3600),
        time_machine.travel(at(FIRST_DAY, 9), tick=False) as traveller,
    ):
        for n in range(days):
            day = FIRST_DAY + timedelta(days=n)
            traveller.move_to(at(day, 9))
            _a_day(traveller, day, n, roles)
            if each_day is not None:
                each_day(traveller, day, n)
            end_of_day(traveller, day)
        for n in range(days, days + then):
            end_of_day(traveller, FIRST_DAY + timedelta(days=n))
    return roles


def _a_day(traveller, day: date, n: int, roles: dict[str, Charge]) -> None:
    ours = charge_here(10_000 + 100 * n)
    at_checkout = take_payment(amount=4_000 + 10 * n, currency="eur" if n % 7 == 3 else "usd")
    traveller.move_to(at(day, 10))
    refund(ours, 1_000 + n)  # part of today's charge, through the API's service
    if n % 5 == 2:
        refund(ours)  # the rest of it
    traveller.move_to(at(day, 11))
    if n % 4 == 1:  # a refund in the provider's dashboard, of its checkout payment
        refund_from_dashboard(charge_id=at_checkout.provider_id, amount=1_500)
    {
        4: _late_failure,
        6: _first_dispute,
        8: _second_dispute,
        12: _first_dispute_won,
        15: _second_dispute_lost,
        17: _inquiry,
    }.get(n, lambda traveller, roles: None)(traveller, roles)


def _late_failure(traveller, roles) -> None:
    roles["late_failure"] = charge = charge_here(3_000, simulate_refund="succeed_then_fail")
    refund(charge, 2_000)
    traveller.shift(timedelta(minutes=30))
    tell(news.advance())  # the card was closed: the refund fails, its money comes back


def _first_dispute(traveller, roles) -> None:
    roles["won"] = charge = charge_here(8_000)
    dispute(charge, "needs_response")


def _second_dispute(traveller, roles) -> None:
    roles["lost"] = charge = charge_here(6_500)
    dispute(charge, "needs_response")


def _first_dispute_won(traveller, roles) -> None:
    dispute(roles["won"], "under_review")
    dispute(roles["won"], "won")


def _second_dispute_lost(traveller, roles) -> None:
    dispute(roles["lost"], "lost")


def _inquiry(traveller, roles) -> None:
    """An inquiry (warning_needs_response) takes no money, and the provider allows a
    refund while it is open: we follow it."""
    roles["inquiry"] = charge = charge_here(5_000)
    dispute(charge, "warning_needs_response")
    refund(charge, 5_000)
    dispute(charge, "charge_refunded")
