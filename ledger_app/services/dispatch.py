"""Sending refunds and charges to the provider, and settling what it answers.

Reserve (create_refund, one transaction) -> dispatch (no transaction, no lock held,
the stored provider key on every attempt) -> settle (one transaction, with its ledger
entry). A timeout is `unknown`, never `failed`: only the provider's own "no" releases
money. The reconciler asks the provider about what is unknown or stale and settles it
through the same settle functions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger_app import faults
from ledger_app.gateways import get_gateway
from ledger_app.gateways.base import ChargeAnswer, Gateway, OutcomeUnknown, RefundAnswer
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.selectors import in_doubt, lease_free
from ledger_app.services.ledger import append_entry
from ledger_app.services.locks import charges_for_update

log = logging.getLogger("ledger_app.dispatch")

SUCCEEDED, FAILED, UNKNOWN, PENDING = "succeeded", "failed", "unknown", "pending"
# The only moves a refund or charge may make. Nothing moves backwards or out of a final state.
FORWARD = {PENDING: {SUCCEEDED, FAILED, UNKNOWN}, UNKNOWN: {SUCCEEDED, FAILED}}


@dataclass(frozen=True)
class Outcome:
    status: str  # succeeded, failed or unknown
    provider_id: str = ""
    detail: str = ""

    @classmethod
    def from_answer(cls, answer: RefundAnswer | ChargeAnswer) -> Outcome:
        if answer.verdict == "succeeded":
            return cls(SUCCEEDED, answer.provider_id)
        return cls(FAILED, answer.provider_id, answer.decline_reason or "declined")


def _ask(call: Callable[[], RefundAnswer | ChargeAnswer]) -> Outcome:
    try:
        answer = call()
    except OutcomeUnknown as exc:
        return Outcome(UNKNOWN, detail=str(exc) or type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the provider may have acted
        log.exception("gateway call failed unexpectedly; outcome unknown")
        return Outcome(UNKNOWN, detail=f"unexpected {type(exc).__name__}")
    return Outcome.from_answer(answer)


def _may_move(current: str, new: str, what: str) -> bool:
    if new == current:
        return False
    if new not in FORWARD.get(current, ()):
        log.error("%s is %s; provider now says %s; left as it is", what, current, new)
        return False
    return True


# --- the one guarded send ----------------------------------------------------------

OPEN = (PENDING, UNKNOWN)


@dataclass(frozen=True)
class Sent:
    """What one pass of the guarded send did.

    step: `sent` (the provider was asked to act and answered or timed out), `looked_up`
    (its record settled the item, nothing was sent), `no_answer` (the lookup could not say;
    nothing was sent, the lease runs out and a later pass asks again), `busy` (another
    sender holds the lease), `final` (already settled; nothing to do).
    """

    item: Refund | Charge
    step: str

    @property
    def acted(self) -> bool:
        """False when this pass left the item to another sender or found it settled."""
        return self.step not in ("busy", "final")


@dataclass(frozen=True)
class _Kind:
    """What differs between sending a refund and capturing a charge."""

    name: str  # "refund" or "charge": checkpoint names and log lines
    model: type[Refund] | type[Charge]
    fetch: Callable[[str], Refund | Charge]
    call: Callable[[Gateway, Any], RefundAnswer | ChargeAnswer]
    lookup: Callable[[Gateway, Any], RefundAnswer | ChargeAnswer | None]
    settle: Callable[..., Refund | Charge]
    before_call_point: str  # fault checkpoints around the provider call (ledger_app.faults)
    after_call_point: str


def _guarded_send(
    kind: _Kind,
    pk: str,
    *,
    gateway: Gateway | None,
    ask_first: bool,
    lease_seconds: int | None,
    actor: str,
) -> Sent:
    """The only code path to the provider's refund and charge calls. In order:

    1. Take the lease and record the attempt, in one committed UPDATE, before anything
       reaches the provider: only an open item whose lease is free (none, or run out) is
       taken, so no two processes send one item at once, and a process that dies after
       this leaves `dispatch_attempts` counting the attempt it may have made.
    2. If an attempt may already have reached the provider (an earlier attempt was
       recorded, the item is unknown, or the caller asks to), look it up first: its record
       settles the item; no record means it never applied, so send; no answer means
       nothing is sent and the lease runs out before anyone tries again.
    3. Send with the item's stored provider key and settle what the provider says.
    """
    gateway = gateway or get_gateway()
    now = timezone.now()
    with transaction.atomic(durable=True):
        taken = kind.model.objects.filter(lease_free(now), pk=pk, status__in=OPEN).update(
            leased_until=lease_expiry(now, lease_seconds),
            dispatch_attempts=F("dispatch_attempts") + 1,
        )
    item = kind.fetch(pk)
    if not taken:
        return Sent(item, "busy" if item.status in OPEN else "final")
    if ask_first or item.status == UNKNOWN or item.dispatch_attempts > 1:
        try:
            answer = kind.lookup(gateway, item)
        except OutcomeUnknown as exc:
            log.info("%s %s: provider cannot say (%s); left %s", kind.name, pk, exc, item.status)
            return Sent(item, "no_answer")
        if answer is not None:
            outcome = Outcome.from_answer(answer)
            return Sent(kind.settle(pk, outcome, actor=actor), "looked_up")
    faults.checkpoint(kind.before_call_point)
    outcome = _ask(lambda: kind.call(gateway, item))
    faults.checkpoint(kind.after_call_point)
    return Sent(kind.settle(pk, outcome, actor=actor), "sent")


# --- refunds -------------------------------------------------------------------------


def send_refund(
    refund_id: str,
    *,
    gateway: Gateway | None = None,
    ask_first: bool = False,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent:
    """The one way a refund reaches the provider (inline dispatch, the worker, the
    reconciler and every admin button call it). See `_guarded_send` for the guards:
    lease, attempt on record before the call, lookup before any possible resend.
    `actor` goes on the ledger entry of the settlement."""
    return _guarded_send(
        _REFUND,
        refund_id,
        gateway=gateway,
        ask_first=ask_first,
        lease_seconds=lease_seconds,
        actor=actor,
    )


def _refund_call(gateway: Gateway, refund: Refund) -> RefundAnswer:
    return gateway.refund(
        provider_key=refund.provider_idempotency_key,
        charge_reference=refund.charge.provider_reference,
        amount=refund.amount,
        currency=refund.currency,
        metadata={"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
        timeout=settings.GATEWAY_TIMEOUT_SECONDS,
    )


def _refund_lookup(gateway: Gateway, refund: Refund) -> RefundAnswer | None:
    return gateway.lookup_refund(
        provider_key=refund.provider_idempotency_key,
        charge_reference=refund.charge.provider_reference,
        ledger_refund_id=refund.id,
    )


def settle_refund(*, refund_id: str, outcome: Outcome, actor: str = "") -> Refund:
    """Move a refund to what the provider said, with its ledger entry, in one transaction.

    succeeded: a `refund_succeeded` entry. failed (the provider said no): the amount goes
    back to the charge's refundable balance with a `refund_released` entry. unknown: the
    amount stays reserved. States only move forward; anything else changes nothing.
    """
    charge_id = Refund.objects.values_list("charge_id", flat=True).get(pk=refund_id)
    with transaction.atomic(durable=True):
        # Lock order everywhere: the charge, then its refund.
        charge = charges_for_update().get(pk=charge_id)
        refund = Refund.objects.select_for_update().get(pk=refund_id)
        faults.checkpoint("refund.settle_locked")
        if not _may_move(refund.status, outcome.status, f"refund {refund.id}"):
            return refund
        refund.status = outcome.status
        refund.provider_refund_id = outcome.provider_id or refund.provider_refund_id
        refund.status_detail = outcome.detail
        refund.leased_until = None
        refund.save(
            update_fields=[
                "status",
                "provider_refund_id",
                "status_detail",
                "leased_until",
                "updated_at",
            ]
        )
        refund.charge = charge
        if outcome.status == SUCCEEDED:
            append_entry(
                charge=charge,
                refund=refund,
                kind=LedgerEntry.Kind.REFUND_SUCCEEDED,
                amount=refund.amount,
                actor=actor,
            )
        elif outcome.status == FAILED:
            charge.amount_refunded -= refund.amount
            charge.save(update_fields=["amount_refunded", "updated_at"])
            append_entry(
                charge=charge,
                refund=refund,
                kind=LedgerEntry.Kind.REFUND_RELEASED,
                amount=refund.amount,
                memo=outcome.detail,
                actor=actor,
            )
    return refund


_REFUND = _Kind(
    name="refund",
    model=Refund,
    fetch=lambda pk: Refund.objects.select_related("charge").get(pk=pk),
    call=_refund_call,
    lookup=_refund_lookup,
    settle=lambda pk, outcome, actor: settle_refund(refund_id=pk, outcome=outcome, actor=actor),
    before_call_point="refund.before_provider_call",
    after_call_point="refund.after_provider_call",
)


def lease_expiry(now: datetime | None = None, lease_seconds: int | None = None) -> datetime:
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    return (now or timezone.now()) + timedelta(seconds=lease_seconds)


@dataclass
class Tally:
    """How many ended in each status, and the refunds that could not be finished."""

    statuses: Counter = field(default_factory=Counter)
    errors: int = 0

    def add(self, status: str) -> None:
        self.statuses[status] += 1

    def summary(self) -> str:
        parts = [f"{n} {s}" for s, n in sorted(self.statuses.items())]
        if self.errors:
            parts.append(f"{self.errors} interrupted by database errors (retried later)")
        return ", ".join(parts) or "nothing to do"


def drop_broken_connection() -> None:
    """After a DatabaseError outside any transaction: if the connection no longer works
    (the server ended it, the network dropped), close it so the next query opens a new
    one instead of failing on the dead one."""
    if not connection.in_atomic_block and not connection.is_usable():
        connection.close()


def _survive_database_error(what: str, tally: Tally) -> None:
    """The database went away mid-refund. The refund stays claimed until its lease runs
    out and is then sent again with the same key; drop the broken connection and go on."""
    log.exception("%s interrupted by a database error; it will be retried", what)
    tally.errors += 1
    connection.close()


def process_pending_refunds(
    *,
    batch_size: int = 100,
    lease_seconds: int | None = None,
    gateway: Gateway | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> Tally:
    """Send every pending refund whose lease is free, oldest first, through send_refund.

    Any number of workers may run side by side: each refund's lease is taken by one
    conditional UPDATE, so a refund another worker holds is skipped, not waited for.
    Each run walks the queue once (keyset order), so a refund left to a lease that has
    not run out is not retried in a tight loop.
    """
    tally = Tally()
    after: tuple[datetime, str] | None = None
    while not should_stop():
        queue = Refund.objects.filter(lease_free(timezone.now()), status=PENDING)
        if after is not None:
            queue = queue.filter(
                Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1])
            )
        try:
            batch = list(
                queue.order_by("created_at", "id").values_list("created_at", "id")[:batch_size]
            )
        except DatabaseError:
            _survive_database_error("reading the queue", tally)
            break
        if not batch:
            break
        for after in batch:
            if should_stop():
                break
            try:
                sent = send_refund(after[1], gateway=gateway, lease_seconds=lease_seconds)
            except DatabaseError:
                _survive_database_error(f"refund {after[1]}", tally)
                continue
            if not sent.acted:
                continue  # another sender has it
            tally.add(sent.item.status)
            on_refund(sent.item)
    return tally


def reconcile_refund(
    refund_id: str,
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent:
    """Ask the provider about one refund in doubt, through send_refund: its record settles
    the refund; no record means it never applied, so it is sent again with its same key;
    no answer leaves it as it is. A refund another sender holds, or a settled one, is left
    alone."""
    return send_refund(
        refund_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds, actor=actor
    )


def reconcile_refunds(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> Tally:
    """reconcile_refund for every unknown refund and every pending one nobody is sending."""
    gateway = gateway or get_gateway()
    candidates = Refund.objects.filter(in_doubt(lease_seconds=lease_seconds)).order_by(
        "created_at", "id"
    )
    return _each(
        candidates,
        lambda pk: reconcile_refund(pk, gateway=gateway, lease_seconds=lease_seconds),
        on_refund,
    )


def _each(candidates, reconcile_one: Callable[[str], Sent], on_item: Callable) -> Tally:
    """Reconcile each candidate in turn; a database error costs only that one."""
    tally = Tally()
    for pk in list(candidates.values_list("pk", flat=True)):
        try:
            sent = reconcile_one(pk)
        except DatabaseError:
            _survive_database_error(f"{candidates.model._meta.model_name} {pk}", tally)
            continue
        if not sent.acted:
            continue  # settled meanwhile, or another sender has it
        tally.add(sent.item.status)
        on_item(sent.item)
    return tally


# --- charges -------------------------------------------------------------------------


def send_charge(
    charge_id: str,
    *,
    gateway: Gateway | None = None,
    ask_first: bool = False,
    lease_seconds: int | None = None,
) -> Sent:
    """The one way a capture reaches the provider: the same guards as send_refund."""
    return _guarded_send(
        _CHARGE,
        charge_id,
        gateway=gateway,
        ask_first=ask_first,
        lease_seconds=lease_seconds,
        actor="",
    )


def _charge_call(gateway: Gateway, charge: Charge) -> ChargeAnswer:
    return gateway.charge(
        provider_key=charge.provider_idempotency_key,
        amount=charge.amount,
        currency=charge.currency,
        description=charge.description,
        metadata={**charge.metadata, "ledger_charge_id": charge.id},
        timeout=settings.GATEWAY_TIMEOUT_SECONDS,
    )


def _charge_lookup(gateway: Gateway, charge: Charge) -> ChargeAnswer | None:
    return gateway.lookup_charge(
        provider_key=charge.provider_idempotency_key, ledger_charge_id=charge.id
    )


def settle_charge(*, charge_id: str, outcome: Outcome) -> Charge:
    """Move a charge to what the provider said; a success appends `charge_succeeded`."""
    with transaction.atomic(durable=True):
        charge = charges_for_update().get(pk=charge_id)
        faults.checkpoint("charge.settle_locked")
        if not _may_move(charge.status, outcome.status, f"charge {charge.id}"):
            return charge
        charge.status = outcome.status
        charge.provider_charge_id = outcome.provider_id or charge.provider_charge_id
        charge.status_detail = outcome.detail
        charge.leased_until = None
        charge.save(
            update_fields=[
                "status",
                "provider_charge_id",
                "status_detail",
                "leased_until",
                "updated_at",
            ]
        )
        if outcome.status == SUCCEEDED:
            append_entry(
                charge=charge, kind=LedgerEntry.Kind.CHARGE_SUCCEEDED, amount=charge.amount
            )
    return charge


_CHARGE = _Kind(
    name="charge",
    model=Charge,
    # Only charges created here have a provider key; recorded ones are never sent.
    fetch=lambda pk: Charge.objects.get(pk=pk, provider_idempotency_key__isnull=False),
    call=_charge_call,
    lookup=_charge_lookup,
    settle=lambda pk, outcome, actor: settle_charge(charge_id=pk, outcome=outcome),
    before_call_point="charge.before_provider_call",
    after_call_point="charge.after_provider_call",
)


def reconcile_charge(
    charge_id: str, *, gateway: Gateway | None = None, lease_seconds: int | None = None
) -> Sent:
    """Like reconcile_refund, for a charge: its record settles it, no record: capture it
    with its same key, no answer: it stays."""
    return send_charge(charge_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds)


def reconcile_charges(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_charge: Callable[[Charge], None] = lambda charge: None,
) -> Tally:
    """Charges in doubt (unknown, or pending with no sender), asked about like refunds."""
    gateway = gateway or get_gateway()
    candidates = (
        Charge.objects.filter(provider_idempotency_key__isnull=False)
        .filter(in_doubt(lease_seconds=lease_seconds))
        .order_by("created_at", "id")
    )
    return _each(
        candidates,
        lambda pk: reconcile_charge(pk, gateway=gateway, lease_seconds=lease_seconds),
        on_charge,
    )
