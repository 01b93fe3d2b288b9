"""Settling: moving a refund or charge to what the provider said, with its ledger entry,
in one transaction. States only move forward; anything else changes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from ledger_app import faults
from ledger_app.models import Charge, LedgerEntry, MovementStatus, ProviderMovement, Refund
from ledger_app.selectors import charges_for_update
from ledger_app.services.ledger import append_entry

log = logging.getLogger("ledger_app.dispatch")

PENDING, SUCCEEDED, FAILED, UNKNOWN = (
    MovementStatus.PENDING,
    MovementStatus.SUCCEEDED,
    MovementStatus.FAILED,
    MovementStatus.UNKNOWN,
)
# The only moves a refund or charge may make. Nothing moves backwards or out of a final state.
FORWARD = {PENDING: {SUCCEEDED, FAILED, UNKNOWN}, UNKNOWN: {SUCCEEDED, FAILED}}


@dataclass(frozen=True)
class Outcome:
    status: str  # succeeded, failed or unknown
    provider_id: str = ""
    detail: str = ""


def settle_refund(*, refund_id: str, outcome: Outcome, actor: str = "") -> Refund:
    """succeeded: a `refund_succeeded` entry. failed (the provider said no): the amount goes
    back to the charge's refundable balance with a `refund_released` entry. unknown: the
    amount stays reserved."""
    charge_id = Refund.objects.values_list("charge_id", flat=True).get(pk=refund_id)
    with transaction.atomic(durable=True):
        # Lock order everywhere: the charge, then its refund.
        charge = charges_for_update().get(pk=charge_id)
        refund = Refund.objects.select_for_update().get(pk=refund_id)
        faults.checkpoint("refund.settle_locked")
        if not _move(refund, outcome):
            return refund
        refund.charge = charge
        if outcome.status == SUCCEEDED:
            kind, memo = LedgerEntry.Kind.REFUND_SUCCEEDED, ""
        elif outcome.status == FAILED:
            kind, memo = LedgerEntry.Kind.REFUND_RELEASED, outcome.detail
            charge.amount_refunded -= refund.amount
            charge.save(update_fields=["amount_refunded", "updated_at"])
        else:
            return refund
        append_entry(
            charge=charge, refund=refund, kind=kind, amount=refund.amount, memo=memo, actor=actor
        )
    return refund


def settle_charge(*, charge_id: str, outcome: Outcome, actor: str = "") -> Charge:
    """A success appends `charge_succeeded`; failed and unknown move no money."""
    with transaction.atomic(durable=True):
        charge = charges_for_update().get(pk=charge_id)
        faults.checkpoint("charge.settle_locked")
        if _move(charge, outcome) and outcome.status == SUCCEEDED:
            append_entry(
                charge=charge,
                kind=LedgerEntry.Kind.CHARGE_SUCCEEDED,
                amount=charge.amount,
                actor=actor,
            )
    return charge


def _move(item: ProviderMovement, outcome: Outcome) -> bool:
    """Write the provider's word on the locked row if it is a forward move; False (and
    nothing written) if it is not."""
    if outcome.status == item.status:
        return False
    if outcome.status not in FORWARD.get(item.status, ()):
        log.error(
            "%s %s is %s; provider now says %s; left as it is",
            item._meta.model_name,
            item.pk,
            item.status,
            outcome.status,
        )
        return False
    item.status = outcome.status
    setattr(item, item.provider_id_field, outcome.provider_id or item.provider_id)
    item.status_detail = outcome.detail
    item.leased_until = None
    item.save(
        update_fields=[
            "status",
            item.provider_id_field,
            "status_detail",
            "leased_until",
            "updated_at",
        ]
    )
    return True
