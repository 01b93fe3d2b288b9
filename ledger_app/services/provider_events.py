"""What the payment provider tells us later, by webhook: applied once per event, through
the same settle functions the guarded send and the reconciler use.

A refund the provider reports `succeeded` or `failed` (or `canceled`) settles as it says,
including a refund that succeeded and later failed (a closed or expired card): that one
moves to `failed`, its amount is released with a ledger entry, `refund.failed` is
appended, and it joins the support queue. Anything still in flight at the provider
(`pending`, `requires_action`) changes nothing, so an older event arriving after a newer
one cannot move a refund backwards. Charges likewise. Events about objects the ledger
does not know are stored and acknowledged.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction

from ledger_app.models import Charge, ProviderEvent, Refund
from ledger_app.selectors import movement_for_provider_object
from ledger_app.services.dispatch import Outcome, settle_charge, settle_refund

log = logging.getLogger("ledger_app.provider_events")

ACTOR = "provider:webhook"
# The provider's statuses that are its final word; anything else is still in flight.
REFUND_FINAL = {"succeeded": Refund.Status.SUCCEEDED, "failed": Refund.Status.FAILED}
REFUND_FINAL["canceled"] = Refund.Status.FAILED
CHARGE_FINAL = {"succeeded": Charge.Status.SUCCEEDED, "failed": Charge.Status.FAILED}


def apply_provider_event(event: dict[str, Any]) -> str:
    """Apply one provider event (Stripe's shape: id, type, data.object) once, and say what
    it did. A repeat of an event already applied changes nothing."""
    event_id = str(event.get("id") or "")
    if not event_id:
        raise ValueError("a provider event has an id")
    if ProviderEvent.objects.filter(pk=event_id).exists():
        return "duplicate: already applied"
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    obj = obj if isinstance(obj, dict) else {}
    # Settle first, then remember the event: if this process dies in between, the
    # provider sends it again and settling again changes nothing.
    outcome = _apply(obj)
    try:
        with transaction.atomic():
            ProviderEvent.objects.create(
                id=event_id, type=str(event.get("type", ""))[:100], payload=event, outcome=outcome
            )
    except IntegrityError:  # the same event, delivered twice at once
        return "duplicate: already applied"
    log.info("provider event %s (%s): %s", event_id, event.get("type"), outcome)
    return outcome


def _settle_refund(pk: str, outcome: Outcome) -> Refund:
    return settle_refund(refund_id=pk, outcome=outcome, actor=ACTOR, reversal=True)


def _settle_charge(pk: str, outcome: Outcome) -> Charge:
    return settle_charge(charge_id=pk, outcome=outcome, actor=ACTOR)


# object -> (model, the provider's final statuses, where it says why, how it settles)
KINDS = {
    "refund": (Refund, REFUND_FINAL, "failure_reason", _settle_refund),
    "charge": (Charge, CHARGE_FINAL, "failure_code", _settle_charge),
}


def _apply(obj: dict[str, Any]) -> str:
    kind = obj.get("object")
    if kind not in KINDS:
        return f"ignored: {kind or 'no'} object"
    model, final, reason_field, settle = KINDS[kind]
    item = movement_for_provider_object(model, obj)
    if item is None:
        return f"unknown {kind} {obj.get('id')}"
    said = obj.get("status")
    status = final.get(said) if isinstance(said, str) else None
    if status is None:
        return f"{kind} {item.pk}: provider says {said!r}; nothing changes"
    outcome = Outcome(status, str(obj.get("id") or ""), _reason(obj, reason_field))
    return f"{kind} {item.pk}: {item.status} -> {settle(item.pk, outcome).status}"


def _reason(obj: dict[str, Any], field: str) -> str:
    if obj.get("status") in ("failed", "canceled"):
        return str(obj.get(field) or obj.get("status"))
    return ""
