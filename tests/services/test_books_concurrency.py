"""The books at once, on PostgreSQL with real threads: a dispute's news told several ways
at the same moment books its money once; two closes at once are one close; a sync and a
close side by side leave the books as either alone would."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.books.services import close_books
from ledger_app.charges.services import create_charge
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import BooksDay, Dispute, Event, LedgerEntry
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from tests.concurrency import run_at_once

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]


def test_one_disputes_news_told_four_times_at_once_books_its_money_once():
    charge = create_charge(amount=7_000, currency="usd").item
    [opened, withdrawn] = news.dispute_news(
        charge_reference=charge.provider_reference,
        amount=7_000,
        currency="usd",
        status="needs_response",
    )
    # The same news under four event ids: a webhook, its resend, and two of another kind.
    told = [
        {**event, "id": f"{event['id']}_{n}"} for n in range(2) for event in (opened, withdrawn)
    ]

    outcomes = run_at_once([functools.partial(apply_provider_event, event) for event in told])

    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    moved = LedgerEntry.objects.filter(charge=charge, kind__startswith="dispute_")
    assert sorted(moved.values_list("kind", "amount")) == [
        ("dispute_fee", 1_500),
        ("dispute_withdrawn", 7_000),
    ]
    assert Dispute.objects.get().status == "needs_response"
    told_types = list(
        Event.objects.filter(charge=charge, type__startswith="charge.dispute.")
        .order_by("type")
        .values_list("type", flat=True)
    )
    assert told_types == ["charge.dispute.created", "charge.dispute.funds_withdrawn"]


def test_two_closes_at_once_are_one_and_a_sync_beside_them_changes_nothing_they_found():
    charge = create_charge(amount=9_000, currency="usd").item
    for amount in (1_000, 2_000, 3_000):
        create_refund(RefundRequest(charge_id=charge.pk, amount=amount))
    since = timezone.now() - timedelta(hours=1)
    sync_provider(since=since)

    results = run_at_once([close_books, close_books, lambda: sync_provider(since=since)])

    closed = [r for r in results[:2] if r is not None]
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len(closed) >= 1 and all(isinstance(r, list) for r in closed)
    (day,) = BooksDay.objects.all()
    assert (day.refunded, day.status) == (6_000, "waiting")  # matched, payouts not yet due
    assert close_books() is not None  # the lease was given back
