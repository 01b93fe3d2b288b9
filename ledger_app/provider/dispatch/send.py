"""The one guarded send: the only code that reaches the provider's refund and charge calls.

Everything that talks to the provider (inline dispatch after a reserve, the worker, the
reconciler, every admin button) calls `send_refund` or `send_charge`, and both run
`_guarded_send`, which enforces the lease, the attempt on record before the call, and the
lookup before any possible resend itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar, cast

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from ledger_app import faults
from ledger_app.charges.models import Charge, ProviderMovement
from ledger_app.compiled import Precompiled, Update, precompiled
from ledger_app.db import ensure_no_transaction, release_connection
from ledger_app.leases import lease_free
from ledger_app.provider.dispatch.settle import (
    FAILED,
    SUCCEEDED,
    UNKNOWN,
    Outcome,
    settle_charge,
    settle_refund,
)
from ledger_app.provider.gateways import get_gateway
from ledger_app.provider.gateways.base import Gateway as Gateway  # the port, named for the callers
from ledger_app.provider.gateways.base import Listed as Listed  # named for sync_provider
from ledger_app.provider.gateways.base import OutcomeUnknown as OutcomeUnknown  # for the callers
from ledger_app.provider.gateways.base import ProviderAnswer
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import refund_with_charge
from serving.logs import bind, naming

log = logging.getLogger("ledger_app.dispatch")


# A refund or a charge: what a send moves.
Movement = TypeVar("Movement", Refund, Charge)


class Step(StrEnum):
    """What one pass of the guarded send did."""

    SENT = "sent"  # the provider was asked to act, and answered or timed out
    LOOKED_UP = "looked_up"  # its record settled the item; nothing was sent
    NO_ANSWER = "no_answer"  # the lookup could not say; nothing sent, the lease runs out
    BUSY = "busy"  # another sender holds the lease
    FINAL = "final"  # already settled; nothing to do


@dataclass(frozen=True)
class Sent(Generic[Movement]):
    item: Movement
    step: Step

    @property
    def acted(self) -> bool:
        """False when this pass left the item to another sender or found it settled."""
        return self.step not in (Step.BUSY, Step.FINAL)


@dataclass(frozen=True)
class _Kind(Generic[Movement]):
    """What differs between sending a refund and capturing a charge."""

    name: str  # "refund" or "charge": log lines
    model: type[Movement]
    fetch: Callable[[str], Movement]
    call: Callable[[Gateway, Movement], ProviderAnswer]
    lookup: Callable[[Gateway, Movement], ProviderAnswer | None]
    settle: Callable[[Movement, Outcome, str], Movement]  # the item as fetched
    before_call_point: str  # fault checkpoints around the provider call (ledger_app.faults)
    after_call_point: str


@functools.cache
def _lease(model: type[Movement]) -> Precompiled[[str, datetime, datetime], int]:
    """The lease and the attempt in one UPDATE of an open item whose lease is free (how
    many rows it took: 0 or 1), precompiled: every send takes it."""

    @precompiled
    def lease(pk: str, now: datetime, until: datetime) -> Update[Movement]:
        free = model.objects.filter(
            lease_free(now), model.sent_here(), pk=pk, status__in=ProviderMovement.OPEN_STATUSES
        )
        attempt = {"leased_until": until, "dispatch_attempts": F("dispatch_attempts") + 1}
        return Update(free, attempt)

    return lease


def _guarded_send(
    kind: _Kind[Movement],
    pk: str,
    *,
    gateway: Gateway | None,
    ask_first: bool,
    lease_seconds: int | None,
    actor: str,
) -> Sent[Movement]:
    """The only code path to the provider's refund and charge calls. In order:

    1. Take the lease and record the attempt, in one committed UPDATE, before anything
       reaches the provider: only an open item made here (`sent_here`: never one the
       provider made itself) whose lease is free (none, or run out) is taken, so no two
       processes send one item at once, and a process that dies after
       this leaves `dispatch_attempts` counting the attempt it may have made.
    2. If an attempt may already have reached the provider (an earlier attempt was
       recorded, the item is unknown, or the caller asks to), look it up first: its record
       settles the item; no record means it never applied, so send; no answer means
       nothing is sent and the lease runs out before anyone tries again.
    3. Send with the item's stored provider key and settle what the provider says.
    """
    gateway = gateway or get_gateway()
    item, taken = _take_lease(kind, pk, lease_seconds)
    if not taken:
        return Sent(item, Step.BUSY if item.status in item.OPEN_STATUSES else Step.FINAL)
    release_connection()  # pooled connections are not held while the provider thinks
    if ask_first or item.status == UNKNOWN or item.dispatch_attempts > 1:
        try:
            answer = kind.lookup(gateway, item)
        except OutcomeUnknown as exc:
            log.info("%s %s: provider cannot say (%s); left %s", kind.name, pk, exc, item.status)
            return Sent(item, Step.NO_ANSWER)
        if answer is not None:
            return Sent(kind.settle(item, _outcome_of(answer), actor), Step.LOOKED_UP)
    faults.checkpoint(kind.before_call_point)
    outcome = _ask(lambda: kind.call(gateway, item))
    faults.checkpoint(kind.after_call_point)
    _log_sent(kind.name, pk, outcome)
    return Sent(kind.settle(item, outcome, actor), Step.SENT)


def _take_lease(kind: _Kind[Movement], pk: str, lease_seconds: int | None) -> tuple[Movement, int]:
    """Step 1 of the guarded send, committed before the provider is called: the item as
    it is now, and whether this sender took its lease (1) or not (0)."""
    now = timezone.now()
    ensure_no_transaction()  # the lease and the attempt commit before the provider call
    taken = _lease(kind.model)(pk, now, lease_expiry(now, lease_seconds))
    item = kind.fetch(pk)
    if isinstance(item, Refund):
        bind(charge_id=item.charge_id)  # for the rest of send_refund (it names the refund)
    return item, taken


def _log_sent(kind_name: str, pk: str, outcome: Outcome) -> None:
    """One line per call that may move money, whatever the provider said: the trail from a
    refund id to what happened to it, at LOG_LEVEL=DEBUG. Not INFO: the attempt and its
    outcome are on record in the database already, and a line per refund would bury a
    bulk run's own report (and fill a stderr pipe nobody reads)."""
    said = f"{outcome.status} {outcome.detail}".strip()
    log.debug("%s %s sent to the provider: %s", kind_name, pk, said)


def recheck_refund(refund_id: str, *, gateway: Gateway | None = None) -> Refund:
    """Ask the provider again about a refund it accepted, in case it failed since (a closed
    or expired card) and the webhook saying so never arrived. Only asks, never sends: its
    record saying declined moves the refund to failed and releases the amount
    (`settle_refund(reversal=True)`); its record saying succeeded with a card reference
    (ARN) the refund does not hold yet records it (written once, never replaced);
    anything else (still succeeded, no record, no answer) leaves it as it is."""
    refund = _REFUND.fetch(refund_id)
    if refund.status != SUCCEEDED:
        return refund
    try:
        answer = _REFUND.lookup(gateway or get_gateway(), refund)
    except OutcomeUnknown as exc:
        log.info("refund %s: provider cannot say (%s); left succeeded", refund_id, exc)
        return refund
    if answer is None:
        return refund
    if answer.verdict == "succeeded" and answer.reference in ("", refund.destination_reference):
        return refund  # nothing new: no lock taken
    outcome = _outcome_of(answer)
    return settle_refund(refund_id=refund_id, outcome=outcome, actor="reconcile", reversal=True)


def _outcome_of(answer: ProviderAnswer) -> Outcome:
    if answer.verdict == "succeeded":
        return Outcome(SUCCEEDED, answer.provider_id, reference=answer.reference)
    return Outcome(FAILED, answer.provider_id, answer.decline_reason or "declined")


def _ask(call: Callable[[], ProviderAnswer]) -> Outcome:
    try:
        answer = call()
    except OutcomeUnknown as exc:
        return Outcome(UNKNOWN, detail=str(exc) or type(exc).__name__)
    except Exception as exc:  # whatever broke, the provider may have acted
        log.exception("gateway call failed unexpectedly; outcome unknown")
        return Outcome(UNKNOWN, detail=f"unexpected {type(exc).__name__}")
    return _outcome_of(answer)


def lease_expiry(now: datetime | None = None, lease_seconds: int | None = None) -> datetime:
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    return (now or timezone.now()) + timedelta(seconds=lease_seconds)


@naming("refund_id")
def send_refund(
    refund_id: str,
    *,
    gateway: Gateway | None = None,
    ask_first: bool = False,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent[Refund]:
    """The one way a refund reaches the provider. See `_guarded_send` for the guards.
    `actor` goes on the ledger entry of the settlement."""
    return _guarded_send(
        _REFUND,
        refund_id,
        gateway=gateway,
        ask_first=ask_first,
        lease_seconds=lease_seconds,
        actor=actor,
    )


@naming("charge_id")
def send_charge(
    charge_id: str,
    *,
    gateway: Gateway | None = None,
    ask_first: bool = False,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent[Charge]:
    """The one way a capture reaches the provider: the same guards as send_refund."""
    return _guarded_send(
        _CHARGE,
        charge_id,
        gateway=gateway,
        ask_first=ask_first,
        lease_seconds=lease_seconds,
        actor=actor,
    )


# --- the provider calls: used only through _REFUND and _CHARGE, by _guarded_send ------


def _refund_call(gateway: Gateway, refund: Refund) -> ProviderAnswer:
    return gateway.refund(
        provider_key=refund.provider_idempotency_key,
        charge_reference=refund.charge.provider_reference,
        amount=refund.amount,
        currency=refund.currency,
        metadata={"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
        timeout=settings.GATEWAY_TIMEOUT_SECONDS,
    )


def _refund_lookup(gateway: Gateway, refund: Refund) -> ProviderAnswer | None:
    return gateway.lookup_refund(
        provider_key=refund.provider_idempotency_key,
        charge_reference=refund.charge.provider_reference,
        ledger_refund_id=refund.id,
    )


def _charge_call(gateway: Gateway, charge: Charge) -> ProviderAnswer:
    return gateway.charge(
        provider_key=cast(str, charge.provider_idempotency_key),  # fetch: never null
        amount=charge.amount,
        currency=charge.currency,
        description=charge.description,
        metadata={**charge.metadata, "ledger_charge_id": charge.id},
        timeout=settings.GATEWAY_TIMEOUT_SECONDS,
    )


def _charge_lookup(gateway: Gateway, charge: Charge) -> ProviderAnswer | None:
    return gateway.lookup_charge(
        provider_key=cast(str, charge.provider_idempotency_key), ledger_charge_id=charge.id
    )


_REFUND = _Kind(
    name="refund",
    model=Refund,
    fetch=refund_with_charge,
    call=_refund_call,
    lookup=_refund_lookup,
    settle=lambda refund, outcome, actor: settle_refund(
        refund_id=refund.pk, outcome=outcome, actor=actor, charge_id=refund.charge_id
    ),
    before_call_point="refund.before_provider_call",
    after_call_point="refund.after_provider_call",
)

_CHARGE = _Kind(
    name="charge",
    model=Charge,
    # Only charges created here have a provider key; recorded ones are never sent.
    fetch=lambda pk: Charge.objects.get(pk=pk, provider_idempotency_key__isnull=False),
    call=_charge_call,
    lookup=_charge_lookup,
    settle=lambda charge, outcome, actor: settle_charge(
        charge_id=charge.pk, outcome=outcome, actor=actor
    ),
    before_call_point="charge.before_provider_call",
    after_call_point="charge.after_provider_call",
)


def list_created(
    kind: Listed, *, start: datetime, end: datetime, gateway: Gateway | None = None
) -> list[dict[str, Any]]:
    """The provider's objects of `kind` made in [start, end) (sync_provider's one read of
    the provider): asks, moves nothing. Raises OutcomeUnknown when it cannot say now."""
    release_connection()  # no pooled connection is held while the provider answers
    return (gateway or get_gateway()).list_created(kind, start=start, end=end)


def list_paid_out(payout_id: str, *, gateway: Gateway | None = None) -> list[dict[str, Any]]:
    """The balance transactions the provider paid out in that payout: asks, moves nothing.
    Raises OutcomeUnknown when it cannot say now."""
    release_connection()
    return (gateway or get_gateway()).list_paid_out(payout_id)
