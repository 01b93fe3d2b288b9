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

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger_app import faults
from ledger_app.gateways import get_gateway
from ledger_app.gateways.base import ChargeAnswer, Gateway, OutcomeUnknown, RefundAnswer
from ledger_app.models import Charge, LedgerEntry, Refund
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


# --- refunds -------------------------------------------------------------------------


def dispatch_refund(refund_id: str, *, gateway: Gateway | None = None) -> Refund:
    """Make one attempt to send a pending or unknown refund, and settle the answer.

    The provider key is the one stored on the refund when it was created. A refund that
    may already have reached the provider (unknown, or an earlier attempt was made) is
    looked up first and only sent again if the provider has no record of it: providers
    forget idempotency keys (Stripe after 24 hours), and a resend after that would be a
    second refund.
    """
    gateway = gateway or get_gateway()
    refund = Refund.objects.select_related("charge").get(pk=refund_id)
    if refund.status not in (PENDING, UNKNOWN):
        return refund
    if refund.status == UNKNOWN or refund.dispatch_attempts > 1:
        return _look_up_then_send(refund, gateway)
    return _send(refund, gateway)


def _send(refund: Refund, gateway: Gateway) -> Refund:
    faults.checkpoint("refund.before_provider_call")
    outcome = _ask(
        lambda: gateway.refund(
            provider_key=refund.provider_idempotency_key,
            charge_reference=refund.charge.provider_reference,
            amount=refund.amount,
            currency=refund.currency,
            metadata={"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
            timeout=settings.GATEWAY_TIMEOUT_SECONDS,
        )
    )
    faults.checkpoint("refund.after_provider_call")
    return settle_refund(refund_id=refund.id, outcome=outcome)


def _look_up_then_send(refund: Refund, gateway: Gateway) -> Refund:
    """The provider's record settles the refund; no record: send it; no answer: leave it."""
    try:
        answer = gateway.lookup_refund(
            provider_key=refund.provider_idempotency_key,
            charge_reference=refund.charge.provider_reference,
            ledger_refund_id=refund.id,
        )
    except OutcomeUnknown as exc:
        log.info("refund %s: provider cannot say (%s); left %s", refund.id, exc, refund.status)
        return refund
    if answer is None:
        return _send(refund, gateway)
    return settle_refund(refund_id=refund.id, outcome=Outcome.from_answer(answer))


def settle_refund(*, refund_id: str, outcome: Outcome) -> Refund:
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
            )
    return refund


def lease_expiry(now: datetime | None = None, lease_seconds: int | None = None) -> datetime:
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    return (now or timezone.now()) + timedelta(seconds=lease_seconds)


def claim_refunds(*, limit: int, lease_seconds: int | None = None) -> list[str]:
    """Lease up to `limit` pending refunds that nobody holds, oldest first.

    skip_locked lets workers on any number of machines claim side by side without
    waiting on or overlapping each other; the lease keeps a claimed refund from being
    sent by anyone else until it expires, which is how a crashed worker's claims return.
    """
    now = timezone.now()
    with transaction.atomic(durable=True):
        ids = list(
            Refund.objects.select_for_update(skip_locked=True)
            .filter(status=PENDING)
            .filter(Q(leased_until__isnull=True) | Q(leased_until__lte=now))
            .order_by("created_at", "id")
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            Refund.objects.filter(pk__in=ids).update(
                leased_until=lease_expiry(now, lease_seconds),
                dispatch_attempts=F("dispatch_attempts") + 1,
            )
    return ids


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
    """Claim and dispatch pending refunds batch by batch until none is claimable."""
    tally = Tally()
    while not should_stop():
        try:
            ids = claim_refunds(limit=batch_size, lease_seconds=lease_seconds)
        except DatabaseError:
            _survive_database_error("claiming refunds", tally)
            break
        if not ids:
            break
        for refund_id in ids:
            if should_stop():
                break  # the rest stay leased and come back when the lease runs out
            try:
                refund = dispatch_refund(refund_id, gateway=gateway)
            except DatabaseError:
                _survive_database_error(f"refund {refund_id}", tally)
                continue
            tally.add(refund.status)
            on_refund(refund)
    return tally


def _take_stale_lease(refund_id: str, now: datetime, lease_seconds: int | None) -> bool:
    taken = Refund.objects.filter(pk=refund_id, status=PENDING, leased_until__lte=now).update(
        leased_until=lease_expiry(now, lease_seconds), dispatch_attempts=F("dispatch_attempts") + 1
    )
    return taken == 1


def reconcile_refund(
    refund_id: str, *, gateway: Gateway | None = None, lease_seconds: int | None = None
) -> Refund:
    """Ask the provider about one unknown refund, or one pending refund whose lease ran out.

    The provider's record settles it (through settle_refund). No record: it never applied
    the refund, so it is sent again with its same key. No answer: it stays as it is. A
    pending refund that a dispatcher still holds, or a settled one, is left alone.
    """
    gateway = gateway or get_gateway()
    now = timezone.now()
    refund = Refund.objects.select_related("charge").get(pk=refund_id)
    if refund.status == PENDING:
        if not _take_stale_lease(refund_id, now, lease_seconds):
            return refund  # a dispatcher holds it
    elif refund.status != UNKNOWN:
        return refund
    return _look_up_then_send(refund, gateway)


def reconcile_refunds(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> Tally:
    """reconcile_refund for every unknown refund and every pending one whose lease ran out."""
    gateway = gateway or get_gateway()
    candidates = Refund.objects.filter(
        Q(status=UNKNOWN) | Q(status=PENDING, leased_until__lte=timezone.now())
    ).order_by("created_at", "id")
    return _each(
        candidates,
        lambda pk: reconcile_refund(pk, gateway=gateway, lease_seconds=lease_seconds),
        on_refund,
    )


def _each(candidates, reconcile_one: Callable, on_item: Callable) -> Tally:
    """Reconcile each candidate in turn; a database error costs only that one."""
    tally = Tally()
    for pk in list(candidates.values_list("pk", flat=True)):
        try:
            item = reconcile_one(pk)
        except DatabaseError:
            _survive_database_error(f"{candidates.model._meta.model_name} {pk}", tally)
            continue
        tally.add(item.status)
        on_item(item)
    return tally


# --- charges -------------------------------------------------------------------------


def dispatch_charge(charge_id: str, *, gateway: Gateway | None = None) -> Charge:
    """One capture attempt for a pending or unknown charge, with its stored provider key."""
    gateway = gateway or get_gateway()
    charge = Charge.objects.get(pk=charge_id)
    if charge.status not in (PENDING, UNKNOWN) or not charge.provider_idempotency_key:
        return charge
    faults.checkpoint("charge.before_provider_call")
    outcome = _ask(
        lambda: gateway.charge(
            provider_key=charge.provider_idempotency_key,
            amount=charge.amount,
            currency=charge.currency,
            description=charge.description,
            metadata={**charge.metadata, "ledger_charge_id": charge.id},
            timeout=settings.GATEWAY_TIMEOUT_SECONDS,
        )
    )
    faults.checkpoint("charge.after_provider_call")
    return settle_charge(charge_id=charge.id, outcome=outcome)


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
        charge.save(update_fields=["status", "provider_charge_id", "status_detail", "updated_at"])
        if outcome.status == SUCCEEDED:
            append_entry(
                charge=charge, kind=LedgerEntry.Kind.CHARGE_SUCCEEDED, amount=charge.amount
            )
    return charge


def reconcile_charge(charge_id: str, *, gateway: Gateway | None = None) -> Charge:
    """Like reconcile_refund, for a charge: its record settles it, no record: capture it
    with its same key, no answer: it stays."""
    gateway = gateway or get_gateway()
    charge = Charge.objects.get(pk=charge_id)
    try:
        answer = gateway.lookup_charge(
            provider_key=charge.provider_idempotency_key, ledger_charge_id=charge.id
        )
    except OutcomeUnknown as exc:
        log.info("charge %s: provider cannot say (%s); left %s", charge.id, exc, charge.status)
        return charge
    if answer is None:
        return dispatch_charge(charge.id, gateway=gateway)
    return settle_charge(charge_id=charge.id, outcome=Outcome.from_answer(answer))


def reconcile_charges(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_charge: Callable[[Charge], None] = lambda charge: None,
) -> Tally:
    """Charges in `unknown`, and `pending` ones untouched for a lease, asked about like refunds."""
    gateway = gateway or get_gateway()
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    stale_before = timezone.now() - timedelta(seconds=lease_seconds)
    candidates = (
        Charge.objects.filter(provider_idempotency_key__isnull=False)
        .filter(Q(status=UNKNOWN) | Q(status=PENDING, updated_at__lte=stale_before))
        .order_by("created_at", "id")
    )
    return _each(candidates, lambda pk: reconcile_charge(pk, gateway=gateway), on_charge)
