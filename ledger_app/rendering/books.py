"""The provider's balance transactions and payouts as the API shows them: Stripe's
`balance_transaction` and `payout` objects, from what the books mirrored (ledger_app/books)."""

from __future__ import annotations

from typing import Any

from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.rendering.fields import unix

FEE_DESCRIPTIONS = {"adjustment": "Dispute fee"}


def render_balance_transaction(bt: BalanceTransaction) -> dict[str, Any]:
    return balance_transaction_shape(
        id=bt.id,
        amount=bt.amount,
        available_on=unix(bt.available_on),
        created=unix(bt.created),
        currency=bt.currency,
        description=bt.description or None,
        fee=bt.fee,
        net=bt.net,
        reporting_category=bt.reporting_category,
        source=bt.source or None,
        status=bt.status or "available",
        type=bt.type,
    )


def balance_transaction_shape(
    *, fee: int, currency: str, type: str, **fields: Any
) -> dict[str, Any]:
    """Stripe's balance transaction object, its fields in Stripe's order; its one fee, when
    it has one, as Stripe's stripe_fee."""
    details = [
        {
            "amount": fee,
            "application": None,
            "currency": currency,
            "description": FEE_DESCRIPTIONS.get(type, "Stripe processing fees"),
            "type": "stripe_fee",
        }
    ]
    return {
        "id": fields["id"],
        "object": "balance_transaction",
        "amount": fields["amount"],
        "available_on": fields["available_on"],
        "balance_type": "payments",
        "created": fields["created"],
        "currency": currency,
        "description": fields.get("description"),
        "exchange_rate": None,
        "fee": fee,
        "fee_details": details if fee else [],
        "net": fields["net"],
        "reporting_category": fields["reporting_category"],
        "source": fields.get("source"),
        "status": fields["status"],
        "type": type,
    }


def render_payout(payout: Payout) -> dict[str, Any]:
    return {
        "id": payout.id,
        "object": "payout",
        "amount": payout.amount,
        "application_fee": None,
        "application_fee_amount": None,
        "arrival_date": unix(payout.arrival_date),
        "automatic": payout.automatic,
        "balance_transaction": payout.balance_transaction or None,
        "created": unix(payout.created),
        "currency": payout.currency,
        "description": payout.description or None,
        "destination": None,
        "failure_balance_transaction": None,
        "failure_code": None,
        "failure_message": None,
        "livemode": False,
        "metadata": {},
        "method": payout.method or "standard",
        "original_payout": None,
        "reversed_by": None,
        "source_type": "card",
        "statement_descriptor": None,
        "status": payout.status or "paid",
        "type": payout.type or "bank_account",
    }
