"""The simulated provider's records as its API describes them: Stripe's refund, charge,
dispute, balance transaction and payout objects, as its webhooks carry them and its list
calls return them."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

from django.utils import timezone

from simulated_provider.card_network import destination_details
from simulated_provider.models import (
    ProviderBalanceTransaction,
    ProviderCharge,
    ProviderDispute,
    ProviderObject,
    ProviderPayout,
    ProviderRefund,
)

# Its own statuses in Stripe's words: a refund or charge refused when asked is `failed`.
STRIPE_STATUS = {
    ProviderObject.Status.PENDING: "pending",
    ProviderObject.Status.SUCCEEDED: "succeeded",
    ProviderObject.Status.DECLINED: "failed",
    ProviderObject.Status.FAILED: "failed",
}


def refund_object(record: ProviderRefund) -> dict[str, Any]:
    return {
        "id": record.provider_id,
        "object": "refund",
        "charge": record.charge_reference,
        "amount": record.amount,
        "currency": record.currency,
        "status": STRIPE_STATUS[ProviderObject.Status(record.status)],
        "failure_reason": record.decline_reason or None,
        "destination_details": destination_details(record),
        "metadata": record.metadata,
        "created": int(record.created_at.timestamp()),
    }


def charge_object(record: ProviderCharge) -> dict[str, Any]:
    status = STRIPE_STATUS[ProviderObject.Status(record.status)]
    return {
        "id": record.provider_id,
        "object": "charge",
        "amount": record.amount,
        "amount_captured": record.amount if status == "succeeded" else 0,
        "captured": status == "succeeded",
        "currency": record.currency,
        "status": status,
        "failure_code": record.decline_reason or None,
        "description": record.description or None,
        "metadata": record.metadata,
        "created": int(record.created_at.timestamp()),
    }


def _unix_day(day: date) -> int:
    return int(datetime.combine(day, time(), tzinfo=UTC).timestamp())


def balance_transaction_object(record: ProviderBalanceTransaction) -> dict[str, Any]:
    today = timezone.now().astimezone(UTC).date()
    fee_details = [
        {
            "amount": record.fee,
            "application": None,
            "currency": record.currency,
            "description": "Dispute fee"
            if record.type == "adjustment"
            else "Stripe processing fees",
            "type": "stripe_fee",
        }
    ]
    return {
        "id": record.provider_id,
        "object": "balance_transaction",
        "amount": record.amount,
        "available_on": _unix_day(record.available_on),
        "created": int(record.created_at.timestamp()),
        "currency": record.currency,
        "description": None,
        "exchange_rate": None,
        "fee": record.fee,
        "fee_details": fee_details if record.fee else [],
        "net": record.net,
        "reporting_category": record.reporting_category,
        "source": record.source or None,
        "status": "available" if record.available_on <= today else "pending",
        "type": record.type,
    }


def payout_object(record: ProviderPayout, balance_transaction: str | None) -> dict[str, Any]:
    today = timezone.now().astimezone(UTC).date()
    return {
        "id": record.provider_id,
        "object": "payout",
        "amount": record.amount,
        "arrival_date": _unix_day(record.arrival_date),
        "automatic": True,
        "balance_transaction": balance_transaction,
        "created": int(record.created_at.timestamp()),
        "currency": record.currency,
        "description": "STRIPE PAYOUT",
        "metadata": {},
        "method": "standard",
        "status": "paid" if record.arrival_date <= today else "in_transit",
        "type": "bank_account",
    }


def dispute_object(record: ProviderDispute) -> dict[str, Any]:
    moved = ProviderBalanceTransaction.objects.filter(source=record.provider_id, type="adjustment")
    return {
        "id": record.provider_id,
        "object": "dispute",
        "charge": record.charge_reference,
        "amount": record.amount,
        "currency": record.currency,
        "status": record.status,
        "reason": "fraudulent",
        # An inquiry (warning_*) takes no money: the charge may still be refunded.
        "is_charge_refundable": record.status.startswith("warning_"),
        "balance_transactions": [
            balance_transaction_object(bt) for bt in moved.order_by("created_at", "id")
        ],
        "created": int(record.created_at.timestamp()),
        "metadata": {},
    }
