"""The checks a refund request passes under its charge's lock, before anything is
written (those that need no database are requests.check_request's): what is left,
whether the charge changed since a form was drawn, whether the refund repeats a recent
one. Each refuses with its domain error; none writes."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from ledger_app import errors
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_state
from ledger_app.money import format_money
from ledger_app.refunds.requests import CheckedRequest
from ledger_app.refunds.selectors import earlier_refund_like


def ensure_unchanged(charge: Charge, seen_state: int) -> None:
    """Refuse when the charge's books moved since the caller's `charge_state()` reading."""
    if charge_state(charge.pk) != seen_state:
        raise errors.ChargeChanged(
            f"Charge {charge.pk} changed since this form was shown: "
            f"{format_money(charge.amount_refunded, charge.currency)} is refunded now and "
            f"{format_money(charge.amount_refundable, charge.currency)} is left. Nothing was "
            "refunded; check the charge and submit again."
        )


def refuse_repeat(request: CheckedRequest, charge: Charge, amount: int, now: datetime) -> None:
    """RepeatOfEarlier when the request asks for a repeat check and the charge had a live
    refund of this amount within the window from another batch or person."""
    if request.refuse_repeats_within is None:
        return
    earlier = earlier_refund_like(
        charge.pk,
        amount,
        since=now - request.refuse_repeats_within,
        other_than_batch=request.batch_id,
    )
    if earlier is None:
        return
    by = f"batch {earlier.batch_id}" if earlier.batch_id else (earlier.actor or earlier.source)
    raise errors.RepeatOfEarlier(
        f"Charge {charge.pk} was refunded {format_money(amount, charge.currency)} "
        f"{timezone.localtime(earlier.created_at):%Y-%m-%d %H:%M %Z} by {by} "
        f"({earlier.pk}, {earlier.get_status_display().lower()}). Nothing was refunded now.",
        earlier=earlier,
    )


def amount_to_refund(charge: Charge, requested: int | None) -> int:
    """What this request refunds from this charge, or the refusal: checked against what is
    left (never the charge amount); exactly what is left is allowed; nothing left refuses
    whatever was asked; omitted means all that is left."""
    blocker = charge.refund_blocker
    if blocker == errors.ChargeNotRefundable.code:
        raise errors.ChargeNotRefundable(
            f"Charge {charge.id} is {charge.status}; only a succeeded charge can be refunded."
        )
    if blocker == errors.ChargeDisagreesWithProvider.code:
        raise errors.ChargeDisagreesWithProvider(
            f"Charge {charge.id}: the provider reports refunds the ledger has no room for; "
            "no refund is made until a lead resolves it."
        )
    if blocker == errors.ChargeDisputed.code and charge.dispute_status == "lost":
        raise errors.ChargeDisputed(
            f"Charge {charge.id} has been charged back (dispute {charge.dispute_id} was "
            "lost): refunding it would pay the money a second time."
        )
    if blocker == errors.ChargeDisputed.code:
        raise errors.ChargeDisputed(
            f"Charge {charge.id} has an open dispute ({charge.dispute_id}, "
            f"{charge.dispute_status}): it cannot be refunded until the dispute is closed."
        )
    if blocker == errors.ChargeAlreadyRefunded.code:
        raise errors.ChargeAlreadyRefunded(f"Charge {charge.id} has already been refunded.")
    remaining = charge.amount_refundable
    amount = remaining if requested is None else requested
    if amount > remaining:
        raise errors.AmountTooLarge(
            f"Refund amount ({format_money(amount, charge.currency)}) is more than what is "
            f"left to refund on charge {charge.id} ({format_money(remaining, charge.currency)})."
        )
    return amount
