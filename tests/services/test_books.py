"""The books closed against the provider (ledger_app/books): over a simulated month every
day closes with all its refunded value matched to the provider's balance transactions and
paid out; each fault the provider can plant is found on its day, by kind, and keeps the day
open until a lead explains it; disputes' money is in the ledger and told to our clients."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.db.models import Sum
from django.test import Client
from django.urls import reverse

from ledger_app import api_versions
from ledger_app.events.endpoints import create_endpoint
from ledger_app.metrics.database import books_families
from ledger_app.models import (
    BalanceTransaction,
    BooksDay,
    BooksDifference,
    Charge,
    Dispute,
    Event,
    LedgerEntry,
    Payout,
    Refund,
    WebhookDelivery,
)
from ledger_app.rendering.events import delivery_body
from simulated_provider.models import ProviderBalanceTransaction, ProviderPayout
from tests.admin.admin_rows import listed, text
from tests.books_month import DAYS, FIRST_DAY, at, live_a_month
from tests.factories import LEADS_MIGRATION, migration_group
from tests.second_factor import verified
from tests.services.people import staff

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]


def gauges(name: str) -> dict[tuple[str, ...], float]:
    families = books_families(at(FIRST_DAY + timedelta(days=DAYS + 3), 12))  # the month's end
    (family,) = [f for f in families if f.name == name]
    return {tuple(s.labels.values()): s.value for s in family.samples}


def test_a_month_closes_every_day_and_books_and_tells_each_dispute(settings, django_user_model):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    endpoint = create_endpoint(
        url="http://127.0.0.1:9/hook",
        enabled_events=["charge.dispute.funds_withdrawn", "charge.dispute.closed"],
        api_version=api_versions.PUBLISHED[0],  # the oldest a client may pin
    )

    roles = live_a_month(then=3)

    every_day_closed_with_everything_matched(roles)
    the_admin_page_says_so(staff(django_user_model, "lead", migration_group(LEADS_MIGRATION)))
    disputes_money_in_the_ledger_and_told_to_our_clients(roles, endpoint)


def the_admin_page_says_so(lead) -> None:
    """A lead's Books against the provider, in production's configuration (the second
    factor): every day, newest first, closed with 100 % matched and no difference."""
    rows = listed(verified(Client(), lead), reverse("admin:ledger_app_booksday_changelist"))

    assert len(rows) == BooksDay.objects.count() > DAYS
    shown = [text(row["day_display"]) for row in rows]
    assert set(shown) == {(FIRST_DAY + timedelta(days=n)).isoformat() for n in range(DAYS)}
    assert shown == sorted(shown, reverse=True)  # newest first
    for row in rows:
        assert text(row["status"]) == "Closed", row
        assert row["matched_display"]["text"][-1] == "100%", row
        assert text(row["differences_display"]) == "None", row
        assert text(row["closed_at"]) != "-", row


def every_day_closed_with_everything_matched(roles: dict) -> None:
    days = list(BooksDay.objects.order_by("day", "currency"))
    assert {d.day for d in days} == {FIRST_DAY + timedelta(days=n) for n in range(DAYS)}
    assert [d for d in days if d.status != "closed"] == []
    assert all(d.refunded == d.matched > 0 for d in days if d.currency == "usd")
    assert BooksDifference.objects.count() == 0
    # What the provider paid out is what its books moved, and the ledger holds each move.
    for payout in ProviderPayout.objects.all():
        paid = ProviderBalanceTransaction.objects.filter(payout=payout).exclude(type="payout")
        assert payout.amount == paid.aggregate(net=Sum("net"))["net"]
    assert Payout.objects.count() == ProviderPayout.objects.count()
    assert set(BalanceTransaction.objects.values_list("pk", flat=True)) == set(
        ProviderBalanceTransaction.objects.values_list("provider_id", flat=True)
    )
    # Each refund shows its balance transaction; the late failure its second one.
    moved = Refund.objects.filter(ledger_entries__kind="refund_succeeded").distinct()
    assert moved.count() > DAYS and not moved.filter(balance_transaction="").exists()
    failed = Refund.objects.get(charge=roles["late_failure"])
    assert failed.status == "failed" and failed.failure_balance_transaction.startswith("txn_")
    assert Refund.objects.filter(source="provider").count() >= 7  # dashboard refunds
    # The command says the same, and verify_ledger finds no difference.
    out = io.StringIO()
    with time_machine.travel(at(FIRST_DAY + timedelta(days=DAYS + 3), 12), tick=False):
        call_command("close_books", "--all", stdout=out)
        call_command("verify_ledger", "--provider", stdout=io.StringIO())  # exit 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("2026-")]
    assert len(lines) == len(days) and all(": closed;" in line for line in lines), lines
    assert all("(100.00%)" in line for line in lines if " usd: " in line), lines
    # The metric says the same: all of the value refunded before the last 4 days matched.
    refunded, matched = (
        gauges("ledger_books_refunded_value"),
        gauges("ledger_books_matched_value"),
    )
    assert refunded[("usd", "4d+")] > 0 and matched == refunded


def disputes_money_in_the_ledger_and_told_to_our_clients(roles: dict, endpoint) -> None:
    won, lost, inquiry = (roles[name] for name in ("won", "lost", "inquiry"))
    entries = LedgerEntry.objects.filter(kind__startswith="dispute_")
    assert sorted(entries.filter(charge=won).values_list("kind", "amount")) == [
        ("dispute_fee", 1_500),
        ("dispute_reinstated", 8_000),
        ("dispute_withdrawn", 8_000),
    ]
    assert sorted(entries.filter(charge=lost).values_list("kind", "amount")) == [
        ("dispute_fee", 1_500),
        ("dispute_withdrawn", 6_500),
    ]
    assert not entries.filter(charge=inquiry).exists()  # an inquiry takes no money
    assert Charge.objects.get(pk=inquiry.pk).amount_refunded == 5_000
    assert (
        Dispute.objects.get(charge=won).status,
        Dispute.objects.get(charge=lost).status,
    ) == (
        "won",
        "lost",
    )
    told = list(
        Event.objects.filter(charge=won, type__startswith="charge.dispute.")
        .order_by("created_at", "id")
        .values_list("type", flat=True)
    )
    assert sorted(told) == sorted(
        [
            "charge.dispute.created",
            "charge.dispute.funds_withdrawn",
            "charge.dispute.updated",
            "charge.dispute.closed",
            "charge.dispute.funds_reinstated",
        ]
    )
    closed = Event.objects.get(charge=won, type="charge.dispute.funds_reinstated").data_object
    assert closed["object"] == "dispute" and closed["charge"] == won.pk
    assert [bt["amount"] for bt in closed["balance_transactions"]] == [-8_000, 8_000]
    # Our endpoint is sent what it asked for, in its version, as Stripe's dispute object.
    sent = WebhookDelivery.objects.filter(endpoint=endpoint).select_related("event")
    assert sorted(d.event.type for d in sent) == [
        "charge.dispute.closed",  # won
        "charge.dispute.closed",  # lost
        "charge.dispute.closed",  # the inquiry, closed as the charge was refunded
        "charge.dispute.funds_withdrawn",
        "charge.dispute.funds_withdrawn",
    ]
    for delivery in sent:
        body = json.loads(delivery_body(delivery.event, endpoint.api_version))
        assert body["data"]["object"]["object"] == "dispute", body
        assert body["data"]["object"]["charge"] in {won.pk, lost.pk, inquiry.pk}
    out = io.StringIO()
    call_command("verify_ledger", stdout=out)
    assert "dispute_withdrawn" in out.getvalue() and "dispute_reinstated" in out.getvalue()
