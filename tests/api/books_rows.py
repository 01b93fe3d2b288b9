"""The provider's balance transactions and payouts as the books mirror them (sync_provider
keeps them so), made directly with the models, for the tests of /v1/balance_transactions
and /v1/payouts and of every endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger_app.books.models import BalanceTransaction, Payout

T = 1_767_225_600  # 2026-01-01 00:00:00 UTC
DAY = 86_400


def at(seconds: int) -> datetime:
    """Half a second into that unix second, which `created` does not show."""
    return datetime.fromtimestamp(seconds, tz=UTC) + timedelta(milliseconds=500)


def day_of(seconds: int) -> datetime:
    """Midnight UTC of that day, as the provider states an arrival or availability day."""
    return datetime.fromtimestamp(seconds - seconds % DAY, tz=UTC)


def balance_transaction(pk: str, **fields: Any) -> BalanceTransaction:
    amount = fields.pop("amount", 10_000)
    fee = fields.pop("fee", 0)
    created = fields.pop("created", T)
    return BalanceTransaction.objects.create(
        id=pk,
        **{
            "type": "charge",
            "reporting_category": fields.get("type", "charge"),
            "amount": amount,
            "fee": fee,
            "net": amount - fee,
            "currency": "usd",
            "status": "available",
            "created": at(created),
            "available_on": day_of(created + 2 * DAY),
            **fields,
        },
    )


def payout(pk: str, **fields: Any) -> Payout:
    created = fields.pop("created", T)
    return Payout.objects.create(
        id=pk,
        **{
            "amount": 1_000,
            "currency": "usd",
            "created": at(created),
            "arrival_date": day_of(created + 2 * DAY),
            "status": "paid",
            "method": "standard",
            "type": "bank_account",
            **fields,
        },
    )


@dataclass(frozen=True)
class Books:
    """What the books hold: ids newest first."""

    moved: list[str]  # every balance transaction
    paid_out: list[str]  # those of the payout `payout`
    payouts: list[str]
    payout: str  # the automatic usd payout, paid


# What a_few_days_of_books holds, oldest first: (id, fields) of each balance transaction,
# then of each payout.
MOVED: list[tuple[str, dict[str, Any]]] = [
    ("txn_charge_usd", {"source": "ch_usd", "fee": 320}),
    ("txn_refund_usd", {"type": "refund", "source": "re_usd", "amount": -2_500, "created": T + 10}),
    (
        "txn_charge_eur",
        {
            "source": "ch_eur",
            "amount": 5_000,
            "fee": 175,
            "currency": "eur",
            "status": "pending",
            "created": T + 20,
        },
    ),
    (
        "txn_payout_usd",
        {
            "type": "payout",
            "source": "po_usd",
            "amount": -7_180,
            "description": "STRIPE PAYOUT",
            "created": T + 30,
        },
    ),
    (
        "txn_dispute_usd",
        {
            "type": "adjustment",
            "reporting_category": "dispute",
            "source": "dp_usd",
            "amount": -1_000,
            "fee": 1_500,
            "created": T + 40,
        },
    ),
]
PAID: list[tuple[str, dict[str, Any]]] = [
    ("po_usd", {"amount": 7_180, "created": T + 30, "balance_transaction": "txn_payout_usd"}),
    (
        "po_eur",
        {
            "currency": "eur",
            "status": "in_transit",
            "method": "instant",
            "automatic": False,
            "created": T + 50,
        },
    ),
    ("po_blank", {"created": T + 60, "status": "", "arrival_date": day_of(T + 5 * DAY)}),
]
PAID_OUT_BY_PO_USD = ("txn_charge_usd", "txn_refund_usd", "txn_payout_usd")


def a_few_days_of_books() -> Books:
    """A usd charge and its partial refund (T, T+10) paid out by po_usd (its own balance
    transaction at T+30, arriving two days later), a eur charge not paid out yet (T+20,
    pending), a dispute's withdrawal with its fee (T+40); an instant eur payout in transit
    (T+50, not automatic) and one listed with no status (T+60, shown as paid)."""
    for pk, fields in MOVED:
        paid_out = {"payout": "po_usd"} if pk in PAID_OUT_BY_PO_USD else {}
        balance_transaction(pk, **fields, **paid_out)
    for pk, fields in PAID:
        payout(pk, **fields)
    return Books(
        moved=[pk for pk, _ in reversed(MOVED)],
        paid_out=[pk for pk, _ in reversed(MOVED) if pk in PAID_OUT_BY_PO_USD],
        payouts=[pk for pk, _ in reversed(PAID)],
        payout="po_usd",
    )


def books_as_they_are() -> tuple[list[Any], list[Any]]:
    """Every balance transaction and payout, field by field: equal before and after means
    nothing was written."""
    return (
        list(BalanceTransaction.objects.order_by("pk").values()),
        list(Payout.objects.order_by("pk").values()),
    )
