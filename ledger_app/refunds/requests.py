"""A refund request as every interface makes it (`RefundRequest`, what create_refund
takes), and the same request after the checks that need no database (`CheckedRequest`):
each field validated, the actor described, the idempotency key fingerprinted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from ledger_app import errors
from ledger_app.charges.models import PAYMENT_INTENT_ID
from ledger_app.idempotency import services as idempotency
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.money import validate_amount
from ledger_app.refunds.models import Refund
from ledger_app.text import has_unstorable_characters
from ledger_app.validation import validate_email_address, validate_metadata, validate_text

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

MAX_CHARGE_ID_LENGTH = 64


@dataclass(frozen=True)
class RefundRequest:
    """A refund as the admin, the API, the commands and bulk files ask for it, unchecked:
    the API passes what the client sent, and create_refund refuses what does not fit with
    the error its check names (`check_request`)."""

    charge_id: str | None = None  # or payment_intent's succeeded charge
    payment_intent: str | None = None  # the API's; with charge_id, the two must agree
    amount: int | None = None  # minor units; None: all that is left
    idempotency_key: str | None = None  # None: nothing deduplicates the request
    reason: str | None = None  # one of Refund.Reason, or nothing
    metadata: dict[str, str] | None = None
    note: str = ""
    actor: AbstractBaseUser | str | None = None  # a saved user, or a label (`cli:ops`)
    source: str = Refund.Source.SYSTEM
    # A person's form: the charge state (charge_state()) they were shown; a charge that
    # moved since is refused (`charge_changed`), under its lock.
    unchanged_since: int | None = None
    batch_id: str = ""  # the bulk run that asks (bulk_refund --batch-id)
    # Refuse a refund of the charge for the same amount made within this long by another
    # batch or person (`repeat_of_earlier`); None: no such check (the API, retries by key).
    refuse_repeats_within: timedelta | None = None
    # Where the customer's mails about it go (Stripe's instructions_email); None: the
    # charge's receipt e-mail, if it has one.
    instructions_email: str | None = None


@dataclass(frozen=True)
class CheckedRequest:
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
    batch_id: str = ""
    payment_intent: str = ""
    refuse_repeats_within: timedelta | None = None
    instructions_email: str = ""


def check_request(request: RefundRequest) -> CheckedRequest:
    """The request validated (amount, ids, reason, metadata, note, actor), with its key's
    fingerprint: raises the LedgerError that refuses it (a programming error, such as an
    unknown source, raises ValueError or TypeError)."""
    _check_options(request)
    payment_intent = validate_payment_intent(request.payment_intent)
    if request.charge_id is not None or not payment_intent:
        validate_charge_id(request.charge_id)
    reason = validate_reason(request.reason)
    metadata = validate_metadata(request.metadata)
    note = validate_text(request.note, errors.InvalidNote)
    instructions_email = validate_email_address(
        request.instructions_email, param="instructions_email"
    )
    created_by, actor_label = describe_actor(request.actor)
    # As sent: an omitted amount is null, which no number equals.
    sent = dict(
        charge=request.charge_id, amount=request.amount, reason=reason, metadata=metadata, note=note
    )
    if payment_intent:  # only then, so keys bound before PaymentIntents replay unchanged
        sent["payment_intent"] = payment_intent
    if instructions_email:  # likewise
        sent["instructions_email"] = instructions_email
    keyed = idempotency.keyed_request(
        request.idempotency_key,
        IdempotencyRecord.Operation.REFUND_CREATE,
        sent,
        owner=idempotency.owner_of(actor_label),
    )
    return CheckedRequest(
        charge_id=request.charge_id or "",  # validated above
        payment_intent=payment_intent,
        amount=request.amount,
        reason=reason,
        metadata=metadata,
        note=note,
        source=request.source,
        actor_label=actor_label,
        created_by=created_by,
        keyed=keyed,
        unchanged_since=request.unchanged_since,
        batch_id=request.batch_id,
        refuse_repeats_within=request.refuse_repeats_within,
        instructions_email=instructions_email,
    )


def _check_options(request: RefundRequest) -> None:
    """What only code sets (source, the repeat window) and the amount."""
    if request.source not in Refund.Source.values:
        raise ValueError(f"unknown refund source {request.source!r}")
    window = request.refuse_repeats_within
    if window is not None and window <= timedelta(0):
        raise ValueError("refuse_repeats_within must be a positive time")
    if request.amount is not None:
        validate_amount(request.amount)


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


def describe_actor(actor: object) -> tuple[Any, str]:
    """A saved user, or a short label such as `cli:ops` or `api_key:sk_live_ab12`: the
    user (or None) and how a ledger entry names who acted."""
    if actor is None:
        return None, ""
    if isinstance(actor, str):
        if has_unstorable_characters(actor):
            raise TypeError("actor label must not contain NUL or lone surrogates")
        return None, actor[:200]
    if getattr(actor, "pk", None) is None or not hasattr(actor, "get_username"):
        raise TypeError(f"actor must be a saved user or a label, not {actor!r}")
    user = cast("AbstractBaseUser", actor)
    return user, f"user:{user.get_username()}"
