"""Creating refunds: the one write path that admin, API and commands all call."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.db import DatabaseError, OperationalError, transaction
from django.utils import timezone

from ledger_app import errors, faults, metrics
from ledger_app.approvals import limits
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_for_update, charge_of_payment_intent
from ledger_app.db import before_lock_wait, drop_broken_connection, is_lock_timeout
from ledger_app.events import services as events
from ledger_app.events.models import EventType
from ledger_app.events.selectors import live_endpoints
from ledger_app.idempotency import services as idempotency
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.idempotency.services import Created
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import new_entry
from ledger_app.money import validate_amount
from ledger_app.provider.dispatch import send_refund
from ledger_app.provider.dispatch.pool import send_within_budget
from ledger_app.refunds import sql_writes
from ledger_app.refunds.models import Refund, new_refund_id
from ledger_app.rendering.charges import EMBEDDED_REFUNDS
from ledger_app.text import has_unstorable_characters
from ledger_app.validation import merge_metadata, validate_metadata, validate_text
from serving.logs import bind, naming

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

from ledger_app.refunds.checks import (
    RefundRequest,
    amount_to_refund,
    ensure_unchanged,
    refuse_repeat,
    validate_charge_id,
    validate_payment_intent,
    validate_reason,
)

log = logging.getLogger("ledger_app.refunds")


@naming("charge_id")  # the refund's id too, once it exists (_reserve)
def create_refund(
    *,
    charge_id: str | None = None,
    payment_intent: str | None = None,
    amount: int | None = None,
    idempotency_key: str | None = None,
    reason: str | None = None,
    metadata: dict[str, str] | None = None,
    note: str = "",
    actor: AbstractBaseUser | str | None = None,
    source: str = Refund.Source.SYSTEM,
    unchanged_since: int | None = None,
    batch_id: str = "",
    refuse_repeats_within: timedelta | None = None,
) -> Created[Refund]:
    """Refund `amount` minor units of a succeeded charge (None: all that is left). The
    charge is `charge_id`, or `payment_intent`'s succeeded charge; given both, the charge
    must belong to that PaymentIntent (else `parameter_invalid`).

    Rules, in the order they apply:
    - The request is validated before anything is read or written: amount (a positive
      int, not bool), key, reason, metadata and note.
    - A key is its owner's (idempotency.owner_of): an API key's own, or the back office's
      for everyone else; the same key from another API key is that client's own request.
    - With a key, the key is looked up first, before the charge and its balance: the same
      request again returns the stored refund and writes nothing (the result says
      `replayed`); a different request under the same key is
      `idempotency_key_reused`, whichever charge it names. No key: no deduplication.
    - The charge row is locked and the amount is checked against what is left
      (amount - amount_refunded), never against the charge amount; exactly what is left
      is allowed; nothing left is `charge_already_refunded`.
    - `unchanged_since` (a person's form): the charge state, `charge_state()`, that the
      person was shown; if the charge has changed since, the request is refused with
      `charge_changed` (under the lock, so two forms shown at once cannot both refund).
      A key already bound still replays first. It is not part of the fingerprint.
    - `refuse_repeats_within` (bulk runs, the admin's form): after the key and under the
      lock, a live refund of the same charge for the same amount made within that long,
      by anyone but this `batch_id`'s run, refuses the request with `repeat_of_earlier`
      naming it (an operator running an old file again under a new batch id). Neither is
      part of the fingerprint: a retry by key replays whatever the window says now.
    - Every check comes before the first write, and all writes share one transaction:
      a refused request leaves no refund, no ledger entry and no bound key.
    - Limits (services/limits.py): over the requester's limit for one refund or for the
      day, the refund is created `awaiting_approval` instead of `pending`: reserved the
      same way, never sent until another person approves it (services/approvals.py).
    The refund is created `pending`, counted in amount_refunded at once, and carries a
    provider idempotency key minted here that never changes. With REFUND_DISPATCH=inline
    (the default) it is then sent to the provider once, after the commit and with no lock
    held, and comes back succeeded, failed (amount released) or unknown (still reserved);
    with `worker` it stays pending for `process_refunds`.
    """
    request = _build_request(
        charge_id=charge_id,
        payment_intent=payment_intent,
        amount=amount,
        idempotency_key=idempotency_key,
        reason=reason,
        metadata=metadata,
        note=note,
        actor=actor,
        source=source,
        unchanged_since=unchanged_since,
        batch_id=batch_id,
        refuse_repeats_within=refuse_repeats_within,
    )
    refund_id = new_refund_id()
    result = idempotency.create_once(
        request.keyed, new_id=refund_id, write=lambda: _reserve(request, refund_id)
    )
    if result.replayed:
        return result
    refund = _after_reserve(result.item)
    metrics.count_refund_created(refund)  # here alone: every interface creates through here
    return Created(refund, replayed=False)


def _build_request(
    *,
    charge_id: object,
    payment_intent: object = None,
    amount: object = None,
    idempotency_key: object = None,
    reason: object = None,
    metadata: object = None,
    note: object = "",
    actor: object = None,
    source: str = Refund.Source.SYSTEM,
    unchanged_since: int | None = None,
    batch_id: str = "",
    refuse_repeats_within: timedelta | None = None,
) -> RefundRequest:
    if source not in Refund.Source.values:
        raise ValueError(f"unknown refund source {source!r}")
    if refuse_repeats_within is not None and refuse_repeats_within <= timedelta(0):
        raise ValueError("refuse_repeats_within must be a positive time")
    if amount is not None:
        validate_amount(amount)
    payment_intent = validate_payment_intent(payment_intent)
    if charge_id is not None or not payment_intent:
        validate_charge_id(charge_id)
    reason = validate_reason(reason)
    metadata = validate_metadata(metadata)
    note = validate_text(note, errors.InvalidNote)
    created_by, actor_label = _describe_actor(actor)
    # As sent: an omitted amount is null, which no number equals.
    sent = dict(charge=charge_id, amount=amount, reason=reason, metadata=metadata, note=note)
    if payment_intent:  # only then, so keys bound before PaymentIntents replay unchanged
        sent["payment_intent"] = payment_intent
    keyed = idempotency.keyed_request(
        idempotency_key,
        IdempotencyRecord.Operation.REFUND_CREATE,
        sent,
        owner=idempotency.owner_of(actor_label),
    )
    return RefundRequest(
        charge_id=cast(str, charge_id or ""),  # validated above
        payment_intent=payment_intent,
        amount=amount,  # type: ignore[arg-type]  # validated above
        reason=reason,
        metadata=metadata,
        note=note,
        source=source,
        actor_label=actor_label,
        created_by=created_by,
        keyed=keyed,
        unchanged_since=unchanged_since,
        batch_id=batch_id,
        refuse_repeats_within=refuse_repeats_within,
    )


def _reserve(request: RefundRequest, refund_id: str) -> Refund:
    """Inside create_once's transaction, with the key (if any) already claimed: lock the
    charge, make every check, then write the refund, the balance, the ledger entry and
    the events together (one round trip on PostgreSQL: `writes`)."""
    bind(refund_id=refund_id)  # until create_refund returns: its send's lines name it too
    endpoints = live_endpoints()  # not the charge's: read before its lock is taken
    now = timezone.now()
    requester_limits = limits.limits_by_currency(
        user=request.created_by, actor_label=request.actor_label
    )
    spent = limits.spent_today_if_limited(request.actor_label, requester_limits, now)
    charge = _lock_charge(request.charge_id or _charge_of(request.payment_intent))
    if request.payment_intent and charge.payment_intent != request.payment_intent:
        raise errors.PaymentIntentMismatch(
            f"Charge {charge.pk} does not belong to PaymentIntent {request.payment_intent}."
        )
    if request.unchanged_since is not None:
        ensure_unchanged(charge, request.unchanged_since)
    amount = amount_to_refund(charge, request.amount)
    refuse_repeat(request, charge, amount, now)
    status, expires_at = _status_within_limits(
        limits.limits_in(requester_limits, charge.currency),
        amount,
        spent.get(charge.currency, 0),
        now,
    )

    # Last check passed: from here on, only writes.
    refund = Refund(
        id=refund_id,
        charge=charge,
        amount=amount,
        currency=charge.currency,
        status=status,
        approval_expires_at=expires_at,
        reason=request.reason,
        metadata=request.metadata,
        note=request.note,
        source=request.source,
        batch_id=request.batch_id,
        payment_intent=charge.payment_intent,
        created_by=request.created_by,
        actor=request.actor_label,
        # No lease and no attempt yet: send_refund takes both before it calls out.
        provider_idempotency_key=f"refund:{refund_id}",
    )
    moved = {"amount_refunded": charge.amount_refunded}
    charge.amount_refunded += amount
    if charge.refunded:
        moved["refunded"] = False
    entry = new_entry(
        charge=charge,
        refund=refund,
        kind=LedgerEntry.Kind.REFUND_RESERVED,
        amount=amount,
        actor=request.actor_label,
    )
    statements = [
        sql_writes.insert([refund]),
        sql_writes.update(charge, ["amount_refunded", "updated_at"]),
        sql_writes.insert([entry]),
    ]
    statements += events.event_writes(
        [(EventType.REFUND_CREATED, refund, None), (EventType.CHARGE_REFUNDED, charge, moved)],
        idempotency_key=request.keyed.key if request.keyed is not None else "",
        endpoints=endpoints,
        newest_refunds=(
            {charge.pk: _newest_refunds(charge, refund)}
            if events.embeds_refunds(endpoints, EventType.CHARGE_REFUNDED)
            else None
        ),
    )
    sql_writes.execute_together(statements)
    faults.checkpoint("refund.reserve_locked")  # written, not yet committed
    return refund


def _status_within_limits(
    requester_limits: limits.Limits, amount: int, spent: int, now: datetime
) -> tuple[str, datetime | None]:
    """pending, or awaiting_approval (and until when) when the refund is over its
    requester's limit for one refund or for the day (`spent`: today's total so far)."""
    if not limits.needs_approval(requester_limits, amount=amount, spent=spent):
        return Refund.Status.PENDING, None
    return Refund.Status.AWAITING_APPROVAL, now + timedelta(hours=settings.APPROVAL_EXPIRY_HOURS)


def _newest_refunds(charge: Charge, refund: Refund) -> list[Refund]:
    """The charge's newest refunds once `refund` is written, as the API lists them (one
    more than a charge embeds, so the snapshot can tell whether there are others)."""
    earlier = list(
        Refund.objects.filter(charge_id=charge.pk).order_by("-created_at", "-id")[:EMBEDDED_REFUNDS]
    )
    newest_first = sorted([refund, *earlier], key=lambda r: (r.created_at, r.pk), reverse=True)
    return newest_first[: EMBEDDED_REFUNDS + 1]


def _charge_of(payment_intent: str) -> str:
    charge_id = charge_of_payment_intent(payment_intent)
    if charge_id is None:
        raise errors.ResourceMissing(
            f"No such payment_intent: '{payment_intent}'.", param="payment_intent"
        )
    return charge_id


def _lock_charge(charge_id: str) -> Charge:
    try:
        before_lock_wait()  # what the key's claim and the requester's lock left
        charge = charge_for_update(charge_id)
    except OperationalError as exc:
        if is_lock_timeout(exc):
            raise errors.LockTimeout() from exc
        raise
    if charge is None:
        raise errors.ResourceMissing(f"No such charge: '{charge_id}'.")
    return charge


@dataclass(frozen=True)
class RefundPreview:
    """What create_refund would do with the same arguments, decided by the same checks."""

    charge: Charge
    amount: int
    replay_of: Refund | None = None


def preview_refund(*, also_reserved: int = 0, **arguments: Any) -> RefundPreview:
    """create_refund's checks, with create_refund's keyword arguments, without its writes
    (for dry runs). `also_reserved` is money that earlier requests of the same dry run
    would already have taken from the charge. Raises the same LedgerError create_refund
    would."""
    request = _build_request(**arguments)
    replay = None if request.keyed is None else idempotency.find_replay(request.keyed)
    if replay is not None:
        return RefundPreview(replay.item.charge, replay.item.amount, replay_of=replay.item)
    charge = Charge.objects.filter(pk=request.charge_id).first()
    if charge is None:
        raise errors.ResourceMissing(f"No such charge: '{request.charge_id}'.")
    charge.amount_refunded += also_reserved
    amount = amount_to_refund(charge, request.amount)
    refuse_repeat(request, charge, amount, timezone.now())
    return RefundPreview(charge, amount)


def _after_reserve(refund: Refund) -> Refund:
    """Inline mode: one pass of the guarded send now, waited for at most
    REFUND_INLINE_WAIT_SECONDS (past that the refund is returned pending and the send
    pool finishes it; `dispatch/pool.py`). The reservation has committed, so if this is
    interrupted the refund stays pending and the worker or the reconciler sends it
    (asking the provider first if an attempt was recorded) with the same provider key."""
    if settings.REFUND_DISPATCH != "inline" or refund.status != Refund.Status.PENDING:
        return refund  # the worker's, or waiting for approval (sent once approved)
    faults.checkpoint("refund.reserved")  # committed, not yet sent
    dispatched = send_inline(refund)
    faults.checkpoint("refund.settled")  # settled (or left for the worker), not yet told
    return dispatched


def send_inline(refund: Refund, *, actor: str = "") -> Refund:
    """The guarded send of a committed pending refund, waited for within the budget; if
    the database fails meanwhile it stays pending and the worker or the reconciler sends
    it (asking the provider first when an attempt was recorded)."""
    try:
        return send_within_budget(partial(send_refund, actor=actor), refund.id, refund)
    except DatabaseError:
        log.exception("refund %s committed; dispatch interrupted, it will be retried", refund.id)
        drop_broken_connection()
        return refund


def actor_label(actor: AbstractBaseUser | str | None) -> str:
    """How a ledger entry names who acted: `user:alice`, `cli:ops`, `api_key:sk_live_ab12`."""
    return _describe_actor(actor)[1]


def _describe_actor(actor: object) -> tuple[Any, str]:
    """A saved user, or a short label such as `cli:ops` or `api_key:sk_live_ab12`."""
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


def update_refund_metadata(*, refund_id: str, metadata: dict[str, str]) -> Refund:
    """Stripe's refund update: metadata is the one field that changes. Keys are merged
    into what is there; a key sent with an empty value is removed. The result is checked
    like any metadata (at most 50 keys, ...). Appends `refund.updated` with the metadata
    as it was; sending nothing new changes nothing and appends nothing. Moves no money."""
    if not isinstance(metadata, dict):
        raise errors.InvalidMetadata()
    with transaction.atomic(durable=True):
        refund = Refund.objects.select_for_update().filter(pk=refund_id).first()
        if refund is None:
            raise errors.ResourceMissing(f"No such refund: '{refund_id}'.")
        merged = merge_metadata(refund.metadata, metadata)
        if merged == refund.metadata:
            return refund
        previous = {"metadata": refund.metadata}
        refund.metadata = merged
        refund.save(update_fields=["metadata", "updated_at"])
        events.record(EventType.REFUND_UPDATED, refund, previous=previous)
    return refund
