"""The checks a refund request passes before anything is written: first those that need
no database (the charge id, the reason), then, under the charge's lock, those that read it
(what is left, whether the charge changed since a form was drawn, whether the refund
repeats a recent one). Each refuses with its domain error; none writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ledger_app import errors
from ledger_app.charges.models import PAYMENT_INTENT_ID, Charge
from ledger_app.charges.selectors import charge_state
from ledger_app.idempotency import services as idempotency
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import earlier_refund_like
from ledger_app.text import has_unstorable_characters

if TYPE_CHECKING:
    pass

MAX_CHARGE_ID_LENGTH = 64


@dataclass(frozen=True)
class RefundRequest:
    """A refund request after every check that needs no database: built before any lock."""

    charge_id: str  # "" when only payment_intent names it
    amount: int | None  # None: refund whatever is left
    reason: str
    metadata: dict[str, str]
    note: str
    source: str
    actor_label: str
    created_by: Any
    keyed: idempotency.IdempotentRequest | None
    unchanged_since: int | None = None
    batch_id: str = ""  # the bulk run that asks (bulk_refund --batch-id)
    payment_intent: str = ""  # the PaymentIntent whose charge to refund (the API's)
    # Refuse a refund of the charge for the same amount made within this long by another
    # batch or person (RepeatOfEarlier); None: no such check (the API, retries by key).
    refuse_repeats_within: timedelta | None = None


def ensure_unchanged(charge: Charge, seen_state: int) -> None:
    """Refuse when the charge's books moved since the caller's `charge_state()` reading."""
    if charge_state(charge.pk) != seen_state:
        raise errors.ChargeChanged(
            f"Charge {charge.pk} changed since this form was shown: "
            f"{format_money(charge.amount_refunded, charge.currency)} is refunded now and "
            f"{format_money(charge.amount_refundable, charge.currency)} is left. Nothing was "
            "refunded; check the charge and submit again."
        )


def refuse_repeat(request: RefundRequest, charge: Charge, amount: int, now: datetime) -> None:
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


def validate_charge_id(charge_id: object) -> None:
    """An id no charge can have is a missing charge, refused before any lock."""
    if (
        not isinstance(charge_id, str)
        or not 0 < len(charge_id) <= MAX_CHARGE_ID_LENGTH
        or has_unstorable_characters(charge_id)
    ):
        raise errors.ResourceMissing("No such charge.")


def validate_payment_intent(payment_intent: object) -> str:
    """A PaymentIntent id no charge can have names nothing: refused before any lock."""
    if payment_intent is None:
        return ""
    if not isinstance(payment_intent, str) or not PAYMENT_INTENT_ID.fullmatch(payment_intent):
        raise errors.ResourceMissing("No such payment_intent.", param="payment_intent")
    return payment_intent


def validate_reason(reason: object) -> str:
    if reason is None or reason == "":
        return ""
    if not isinstance(reason, str) or reason not in Refund.Reason.values:
        raise errors.InvalidReason()
    return reason
