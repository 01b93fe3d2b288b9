"""Creating refunds: the one write path that admin, API and commands all call.

`create_refund(RefundRequest(...))` is the design in one place (docs/architecture.md,
"The refund path"): the checks that need no database; then one transaction
(`transaction.atomic`) in which the key is claimed, the charge is locked with
`select_for_update` and checked (`_lock_and_check`), and the refund, the balance, the
ledger entry and the events are written (`_write`); then, after the commit, the send.

Rules, in the order they apply:
- The request is validated before anything is read or written: amount (a positive int,
  not bool), ids, key, reason, metadata and note (requests.check_request).
- A key is its owner's (idempotency.owner_of): an API key's own, or the back office's for
  everyone else; the same key from another API key is that client's own request.
- With a key, the key comes first, before the charge and its balance: the same request
  again returns the stored refund and writes nothing (the result says `replayed`); a
  different request under the same key is `idempotency_key_reused`, whichever charge it
  names. No key: no deduplication.
- Limits (approvals/limits.py): a requester with a daily limit takes a lock of their own
  and reads today's total under it, before the charge's lock (one lock order).
- The charge row is locked and the amount is checked against what is left (amount -
  amount_refunded), never against the charge amount; exactly what is left is allowed;
  nothing left is `charge_already_refunded`. `payment_intent` with `charge_id`: the
  charge must belong to it (`parameter_invalid`).
- `unchanged_since` (a person's form): a charge whose books moved since the form was
  drawn is refused with `charge_changed`, under the lock, so two forms shown at once
  cannot both refund. A key already bound still replays first.
- `refuse_repeats_within` (bulk runs, the admin's form): under the lock, a live refund
  of the same charge for the same amount made within that long, by anyone but this
  `batch_id`'s run, refuses the request with `repeat_of_earlier` naming it. Neither is
  part of the fingerprint: a retry by key replays whatever the window says now.
- Every check comes before the first write, and all writes share one transaction: a
  refused request leaves no refund, no ledger entry and no bound key.
- Over the requester's limit for one refund or for the day, the refund is created
  `awaiting_approval` instead of `pending`: reserved the same way, never sent until
  another person approves it (approvals/services.py).
The refund is created `pending`, counted in amount_refunded at once, and carries a
provider idempotency key minted here that never changes. With REFUND_DISPATCH=inline (the
default) it is then sent to the provider once, after the commit and with no lock held,
and comes back succeeded, failed (amount released) or unknown (still reserved); with
`worker` it stays pending for `process_refunds`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from ledger_app import errors, faults, metrics, sql_writes
from ledger_app.approvals import limits
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_of_payment_intent
from ledger_app.compiled import precompiled
from ledger_app.customer_mail import services as customer_mail
from ledger_app.customer_mail.models import MailKind
from ledger_app.db import (
    before_lock_wait,
    drop_broken_connection,
    is_lock_timeout,
    lock_wait_budget,
)
from ledger_app.events import services as events
from ledger_app.events.models import EventType, WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.idempotency import services as idempotency
from ledger_app.idempotency.services import Created
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import new_entry
from ledger_app.provider.dispatch import send_refund
from ledger_app.provider.dispatch.pool import send_within_budget
from ledger_app.refunds.checks import amount_to_refund, ensure_unchanged, refuse_repeat
from ledger_app.refunds.models import Refund, new_refund_id
from ledger_app.refunds.requests import CheckedRequest, RefundRequest, check_request, describe_actor
from ledger_app.rendering.snapshots import EMBEDDED_REFUNDS
from ledger_app.validation import merge_metadata
from serving.logs import bind, naming

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

__all__ = [
    "RefundPreview",
    "RefundRequest",
    "actor_label",
    "create_refund",
    "preview_refund",
    "send_inline",
    "update_refund_metadata",
]

log = logging.getLogger("ledger_app.refunds")


@naming("charge_id")  # the refund's id too, once it exists
def create_refund(request: RefundRequest) -> Created[Refund]:
    """Refund `request.amount` minor units of a succeeded charge (None: all that is left),
    by the rules above; the refund made, or the one a retry with the same key replays."""
    checked = check_request(request)
    refund_id = new_refund_id()
    with lock_wait_budget(), transaction.atomic(durable=True):  # one budget for its waits
        replay = idempotency.claim_or_replay(checked.keyed, new_id=refund_id)
        if replay is not None:
            return replay
        bind(refund_id=refund_id)  # until create_refund returns: its send's lines name it too
        endpoints = live_endpoints()  # who is told; read before the charge's lock is taken
        locked = _lock_and_check(checked)
        refund = _write(checked, locked, refund_id, endpoints)
        faults.checkpoint("refund.reserve_locked")  # written, not yet committed
    refund = _after_reserve(refund)
    metrics.count_refund_created(refund)  # here alone: every interface creates through here
    return Created(refund, replayed=False)


@dataclass(frozen=True)
class _Locked:
    """What the checks under the locks decided: the charge (locked until the commit), the
    amount, and whether the refund waits for approval (and until when)."""

    charge: Charge
    amount: int
    status: str
    approval_expires_at: datetime | None


def _lock_and_check(request: CheckedRequest) -> _Locked:
    """The requester's limits (and their lock, with a daily limit), then the charge's row
    lock, then every check that reads them. Writes nothing; raises the refusal."""
    now = timezone.now()
    requester_limits = limits.limits_by_currency(
        user=request.created_by, actor_label=request.actor_label
    )
    spent = limits.spent_today_if_limited(request.actor_label, requester_limits, now)
    charge = _lock_charge(request.charge_id or _charge_of(request.payment_intent))
    _ensure_of_payment_intent(charge, request.payment_intent)
    if request.unchanged_since is not None:
        ensure_unchanged(charge, request.unchanged_since)
    amount = amount_to_refund(charge, request.amount)
    refuse_repeat(request, charge, amount, now)
    in_currency = limits.limits_in(requester_limits, charge.currency)
    if not limits.needs_approval(in_currency, amount=amount, spent=spent.get(charge.currency, 0)):
        return _Locked(charge, amount, Refund.Status.PENDING, None)
    expires_at = now + timedelta(hours=settings.APPROVAL_EXPIRY_HOURS)
    return _Locked(charge, amount, Refund.Status.AWAITING_APPROVAL, expires_at)


@precompiled  # every refund takes this lock: its SQL is compiled once per connection
def _locked_charge(pk: str) -> QuerySet[Charge]:
    return Charge.objects.select_for_update().filter(pk=pk).order_by()  # one row: no sort


def _lock_charge(charge_id: str) -> Charge:
    """The charge, locked for the rest of the transaction (lock order: the key, the
    requester, the charge); `lock_timeout` once the request's lock budget is spent."""
    try:
        before_lock_wait()  # what the key's claim and the requester's lock left
        found = _locked_charge(charge_id)
    except OperationalError as exc:
        if is_lock_timeout(exc):
            raise errors.LockTimeout() from exc
        raise
    if not found:
        raise errors.ResourceMissing(f"No such charge: '{charge_id}'.")
    return found[0]


def _ensure_of_payment_intent(charge: Charge, payment_intent: str | None) -> None:
    """A request naming both a charge and a PaymentIntent: the charge must be its."""
    if payment_intent and charge.payment_intent != payment_intent:
        raise errors.PaymentIntentMismatch(
            f"Charge {charge.pk} does not belong to PaymentIntent {payment_intent}."
        )


def _charge_of(payment_intent: str) -> str:
    charge_id = charge_of_payment_intent(payment_intent)
    if charge_id is None:
        raise errors.ResourceMissing(
            f"No such payment_intent: '{payment_intent}'.", param="payment_intent"
        )
    return charge_id


def _write(
    request: CheckedRequest, locked: _Locked, refund_id: str, endpoints: list[WebhookEndpoint]
) -> Refund:
    """Every check passed: the refund, the charge's new balance, the reserved ledger entry
    and the events, written together (one round trip on PostgreSQL: sql_writes)."""
    charge, refund = locked.charge, _new_refund(request, locked, refund_id)
    moved: dict[str, Any] = {"amount_refunded": charge.amount_refunded}
    charge.amount_refunded += locked.amount
    if charge.refunded:
        moved["refunded"] = False
    entry = new_entry(
        charge=charge,
        refund=refund,
        kind=LedgerEntry.Kind.REFUND_RESERVED,
        amount=locked.amount,
        actor=request.actor_label,
    )
    sql_writes.execute_together(
        [
            sql_writes.insert([refund]),
            sql_writes.update(charge, ["amount_refunded", "updated_at"]),
            sql_writes.insert([entry]),
            *_event_writes(request, refund, moved, endpoints),
            # the customer hears of it now, unless it waits for a lead's approval
            customer_mail.mail_write(refund, charge, MailKind.MADE)
            if locked.status == Refund.Status.PENDING
            else None,
        ]
    )
    return refund


def _new_refund(request: CheckedRequest, locked: _Locked, refund_id: str) -> Refund:
    charge = locked.charge
    return Refund(
        id=refund_id,
        charge=charge,
        amount=locked.amount,
        currency=charge.currency,
        status=locked.status,
        approval_expires_at=locked.approval_expires_at,
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
        instructions_email=request.instructions_email,
        customer_email=customer_mail.first_address(request.instructions_email, charge),
    )


def _event_writes(
    request: CheckedRequest,
    refund: Refund,
    moved: dict[str, Any],
    endpoints: list[WebhookEndpoint],
) -> list[sql_writes.Statement | None]:
    """refund.created and charge.refunded, rendered for the endpoints that are sent them
    (the charge's newest refunds only for an endpoint on a version that embeds them)."""
    charge = refund.charge
    embeds = events.embeds_refunds(endpoints, EventType.CHARGE_REFUNDED)
    return events.event_writes(
        [(EventType.REFUND_CREATED, refund, None), (EventType.CHARGE_REFUNDED, charge, moved)],
        idempotency_key=request.keyed.key if request.keyed is not None else "",
        endpoints=endpoints,
        newest_refunds={charge.pk: _newest_refunds(charge, refund)} if embeds else None,
    )


def _newest_refunds(charge: Charge, refund: Refund) -> list[Refund]:
    """The charge's newest refunds once `refund` is written, as the API lists them (one
    more than a charge embeds, so the snapshot can tell whether there are others)."""
    earlier = list(
        Refund.objects.filter(charge_id=charge.pk).order_by("-created_at", "-id")[:EMBEDDED_REFUNDS]
    )
    newest_first = sorted([refund, *earlier], key=lambda r: (r.created_at, r.pk), reverse=True)
    return newest_first[: EMBEDDED_REFUNDS + 1]


@dataclass(frozen=True)
class RefundPreview:
    """What create_refund would do with the same request, decided by the same checks."""

    charge: Charge
    amount: int
    replay_of: Refund | None = None


def preview_refund(request: RefundRequest, *, also_reserved: int = 0) -> RefundPreview:
    """create_refund's checks of the same request, without its writes (for dry runs).
    `also_reserved` is money that earlier requests of the same dry run would already have
    taken from the charge. Raises the same LedgerError create_refund would."""
    checked = check_request(request)
    replay = None if checked.keyed is None else idempotency.find_replay(checked.keyed)
    if replay is not None:
        return RefundPreview(replay.item.charge, replay.item.amount, replay_of=replay.item)
    charge_id = checked.charge_id or _charge_of(checked.payment_intent)
    charge = Charge.objects.filter(pk=charge_id).first()
    if charge is None:
        raise errors.ResourceMissing(f"No such charge: '{charge_id}'.")
    _ensure_of_payment_intent(charge, checked.payment_intent)
    charge.amount_refunded += also_reserved
    amount = amount_to_refund(charge, checked.amount)
    refuse_repeat(checked, charge, amount, timezone.now())
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
    """The guarded send of a committed pending refund, waited for within the budget. The
    refund exists once it has committed, so the caller is answered with it whatever the
    send meets: if the database fails, or the send raises what nothing expected, it stays
    pending and the worker or the reconciler sends it (asking the provider first when an
    attempt was recorded). An error here would tell a client without an idempotency key
    to try again, and make a second refund."""
    try:
        return send_within_budget(partial(send_refund, actor=actor), refund.id, refund)
    except DatabaseError:
        log.exception("refund %s committed; dispatch interrupted, it will be retried", refund.id)
        drop_broken_connection()
        return refund
    except Exception:
        log.exception("refund %s committed; dispatch failed, it will be retried", refund.id)
        return refund


def actor_label(actor: AbstractBaseUser | str | None) -> str:
    """How a ledger entry names who acted: `user:alice`, `cli:ops`, `api_key:sk_live_ab12`."""
    return describe_actor(actor)[1]


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
