"""The simulated provider's records as its API describes them: Stripe's refund and charge
objects, as its webhooks carry them and its list calls return them."""

from __future__ import annotations

from typing import Any

from simulated_provider.card_network import destination_details
from simulated_provider.models import ProviderCharge, ProviderObject, ProviderRefund

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
