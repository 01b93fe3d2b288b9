"""What the simulated provider does later, and the news it sends about it.

A refund accepted as `pending` (the charge's simulate_refund=pending_then_succeed)
succeeds; one that succeeded with simulate_refund=succeed_then_fail fails, as a refund to
a closed or expired card does. Each change is told as Stripe tells it: an event with the
refund object in `data.object`, for the same inbound path a real provider's webhook takes.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from ledger_app.models import Charge
from simulated_provider.models import ProviderRefund

Status = ProviderRefund.Status
LATER = {
    # behaviour: (status it waits in, status it ends in, event type, failure reason)
    "pending_then_succeed": (Status.PENDING, Status.SUCCEEDED, "refund.updated", ""),
    "succeed_then_fail": (
        Status.SUCCEEDED,
        Status.FAILED,
        "refund.failed",
        "expired_or_canceled_card",
    ),
}


def advance() -> list[dict]:
    """Finish every refund left for later; the events that tell of it, oldest first."""
    news = []
    for record in ProviderRefund.objects.filter(status__in=[Status.PENDING, Status.SUCCEEDED]):
        later = LATER.get(_behaviour(record))
        if later is None or record.status != later[0]:
            continue
        with transaction.atomic():
            record.status, record.decline_reason = later[1], later[3]
            record.save(update_fields=["status", "decline_reason"])
        news.append(event_about(record, later[2]))
    return news


def event_about(record: ProviderRefund, event_type: str) -> dict:
    """A Stripe-shaped event for the refund as it is now."""
    return {
        "id": "evt_sim_" + secrets.token_hex(12),
        "object": "event",
        "type": event_type,
        "created": int(timezone.now().timestamp()),
        "data": {
            "object": {
                "id": record.provider_id,
                "object": "refund",
                "charge": record.charge_reference,
                "amount": record.amount,
                "currency": record.currency,
                "status": str(record.status),
                "failure_reason": record.decline_reason or None,
                "metadata": record.metadata,
            }
        },
    }


def _behaviour(record: ProviderRefund) -> str:
    charge_id = (record.metadata or {}).get("ledger_charge_id")
    metadata = Charge.objects.filter(pk=charge_id).values_list("metadata", flat=True).first()
    return (metadata or {}).get("simulate_refund", "succeed")
