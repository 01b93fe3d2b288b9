"""Refunds made at the provider (its dashboard, another system) adopted into the ledger.

A provider refund nobody here holds (not by its provider id, not by the ledger refund its
metadata names) becomes a ledger refund of source `provider`: its provider id, amount and
status, `actor` "provider". It takes its amount from what is left under the charge's lock,
with its ledger entries (`refund_reserved`, and `refund_succeeded` once it succeeded) and
the events our own refunds write, so `amount_refunded` and the balance are right at once.
Limits and four-eyes do not apply: it has already happened. It is never sent (its
`source` is not `Refund.sent_here`); the provider's later word settles it as ours are.

When it does not fit (more than is left, another currency, a charge that has not
succeeded here), nothing is written but the charge's `provider_disagreement`: why, and the
provider's refund, held. Refunds of the charge are refused with
`charge_disagrees_with_provider` until a lead applies what is held again (`apply_held`,
`manage.py apply_provider_refunds`) once our own refund in the way has
settled or been canceled. A provider refund that already failed moved no money: it is not
adopted. A refund `import_charges` recorded as made before the import (without the
provider's id) is the provider's refund of the same amount: it takes that id; any other
provider refund of such a charge is held, since the import's lump may already count it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger_app import metrics
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_for_update, known_to_the_provider_as
from ledger_app.charges.services import book_refund_made_at_provider
from ledger_app.customer_mail import services as customer_mail
from ledger_app.customer_mail.models import MailKind
from ledger_app.errors import LedgerError
from ledger_app.events.models import WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.ids import new_id
from ledger_app.mirror.objects import (
    Applied,
    amount_of,
    created_of,
    id_of,
    is_id,
    lower,
    shown,
    text,
)
from ledger_app.money import normalize_currency
from ledger_app.provider.card_references import card_reference
from ledger_app.refunds.models import Refund, RefundReason

log = logging.getLogger("ledger_app.mirror")

ACTOR = "provider"  # how its ledger entries and the admin name who made it
KEY_PREFIX = "provider:"  # its provider key: this and its provider id
MAX_KEY = Refund._meta.get_field("provider_idempotency_key").max_length or 255
NOTE = "Made at the provider, outside the back office."
# A provider's status for a refund that moved (or is moving) money, and ours for it.
ADOPTED = {
    "succeeded": Refund.Status.SUCCEEDED,
    "pending": Refund.Status.PENDING,
    "requires_action": Refund.Status.PENDING,
}


@dataclass(frozen=True)
class ProviderRefund:
    """A provider refund object, checked: everything adoption keeps of it."""

    id: str
    charge: str
    amount: int
    currency: str
    status: str
    reason: str = ""
    created: float | None = None  # seconds since 1970
    reference: str = ""  # its card reference (ARN), once the card network gave one

    @property
    def created_at(self) -> datetime | None:
        return None if self.created is None else datetime.fromtimestamp(self.created, tz=UTC)


def read_refund(obj: dict[str, Any]) -> ProviderRefund | str:
    """The provider's refund object as adoption keeps it, or why it is not one."""
    refund_id, charge = obj.get("id"), id_of(obj.get("charge"))
    if not is_id(refund_id) or len(KEY_PREFIX + refund_id) > MAX_KEY:
        return f"its refund's id {shown(refund_id)} is not an id"
    if not is_id(charge):
        return f"refund {refund_id}'s charge {shown(charge)} is not an id"
    amount, currency, status = (
        amount_of(obj.get("amount")),
        lower(obj.get("currency")),
        obj.get("status"),
    )
    if amount is None:
        return f"refund {refund_id}'s amount {shown(obj.get('amount'))} is not one"
    try:
        currency = normalize_currency(currency)
    except LedgerError:
        return f"refund {refund_id}'s currency {shown(currency)} is not one"
    if not isinstance(status, str):
        return f"refund {refund_id} has no status"
    reason = obj.get("reason")
    created = created_of(obj)
    return ProviderRefund(
        id=refund_id,
        charge=charge,
        amount=amount,
        currency=currency,
        status=text(status, 32),
        reason=reason if reason in RefundReason.values else "",
        created=None if created is None else created.timestamp(),
        reference=card_reference(obj.get("destination_details")) if status == "succeeded" else "",
    )


def adopt(seen: ProviderRefund, *, doubt: str = "") -> Applied:
    """Adopt the provider's refund into the ledger, inside the caller's transaction (the
    provider event's, or sync_provider's): what it did, as an outcome line. With a
    `doubt`, it is held for a lead instead, whatever room there is."""
    known = Charge.objects.filter(known_to_the_provider_as(seen.charge))
    pk = known.values_list("pk", flat=True).first()
    if pk is None:
        return Applied(f"unknown charge {seen.charge} of refund {seen.id}")
    endpoints = live_endpoints()  # who is told; read before the charge's lock is taken
    charge = charge_for_update(pk)
    assert charge is not None  # a charge is never deleted
    if seen.status not in ADOPTED:
        dropped = _drop_held(charge, seen)
        said = f"refund {seen.id} made at the provider is {shown(seen.status)}: "
        return Applied(
            said + (f"no longer held on charge {charge.pk}" if dropped else "nothing to adopt"),
            moved=dropped,
        )
    return adopt_locked(charge, seen, endpoints, doubt=doubt)


def _drop_held(charge: Charge, seen: ProviderRefund) -> bool:
    """A held refund that failed at the provider moved no money: no longer held (the
    disagreement stays for a lead to apply the rest, or to see that nothing is left)."""
    disagreement = charge.provider_disagreement or {}
    held = disagreement.get("held", [])
    if not any(item["id"] == seen.id for item in held):
        return False
    charge.provider_disagreement = {
        **disagreement,
        "held": [item for item in held if item["id"] != seen.id],
    }
    charge.save(update_fields=["provider_disagreement", "updated_at"])
    return True


def adopt_locked(
    charge: Charge, seen: ProviderRefund, endpoints: list[WebhookEndpoint], *, doubt: str = ""
) -> Applied:
    """adopt's work on the charge the caller locked: one refund per provider refund (the
    one holding its id is found under the lock; its provider key `provider:<id>` is
    unique besides). A refund an import recorded without the provider's id, of the same
    amount, is that refund: it takes the id instead of a second refund being made."""
    holder = Refund.objects.filter(provider_refund_id=seen.id).values_list("pk", flat=True).first()
    if holder is not None:
        return Applied(f"refund {seen.id} is {holder} already")
    imported = Refund.objects.filter(
        charge=charge, source=Refund.Source.IMPORT, provider_refund_id=""
    ).order_by("created_at", "id")
    same = imported.filter(amount=seen.amount).first()
    if same is not None and not doubt:
        same.provider_refund_id = seen.id
        same.save(update_fields=["provider_refund_id", "updated_at"])
        return Applied(f"refund {seen.id} is {same.pk}, recorded by the import", moved=True)
    if doubt or imported.exists():
        why = doubt or "an import recorded refunds of this charge without the provider's ids"
        return _hold(charge, seen, f"refund {seen.id}: {why}")
    why = _no_room(charge, seen)
    if why:
        return _hold(charge, seen, why)
    refund = _write(charge, seen, endpoints)
    adopted = f"refund {seen.id} made at the provider adopted as {refund.pk} ({refund.status})"
    return Applied(adopted, moved=True)


def _no_room(charge: Charge, seen: ProviderRefund) -> str:
    if charge.provider_disagreement:
        return f"refund {seen.id} waits behind the refunds already held"
    if _ours_unanswered(charge):
        return f"refund {seen.id} may be ours: a refund of ours has no provider id yet"
    if seen.currency != charge.currency:
        return f"refund {seen.id} is in {seen.currency}, the charge in {charge.currency}"
    if charge.status != Charge.Status.SUCCEEDED:
        return f"refund {seen.id} of a charge that is {charge.status} here"
    left = charge.amount - charge.amount_refunded
    if seen.amount > left:
        return f"refund {seen.id} of {seen.amount} with {left} left to refund here"
    return ""


def _ours_unanswered(charge: Charge) -> bool:
    """A refund sent from here whose answer has not come (no provider id yet) might be
    the very refund the provider tells of without our metadata: adopting it as well would
    count the money twice, so it waits for a lead instead."""
    return (
        Refund.objects.filter(
            Refund.sent_here(),
            charge=charge,
            status__in=Refund.OPEN_STATUSES,
            provider_refund_id="",
            dispatch_attempts__gt=0,
        )
        .order_by()
        .exists()
    )


def _hold(charge: Charge, seen: ProviderRefund, why: str) -> Applied:
    """The disagreement on the charge: the first reason, and each refund held, once (told
    again as it was, nothing is written)."""
    held = dict(charge.provider_disagreement or {"why": why, "held": []})
    now = asdict(seen)
    known = any(item["id"] == seen.id for item in held["held"])
    after = [now if item["id"] == seen.id else item for item in held["held"]]
    after += [] if known else [now]
    moved = after != held["held"]
    if moved:
        held["held"] = after
        charge.provider_disagreement = held
        charge.save(update_fields=["provider_disagreement", "updated_at"])
        log.warning("charge %s disagrees with the provider: %s", charge.pk, why)
    return Applied(f"charge {charge.pk} disagrees with the provider: {why}", moved=moved)


def _write(charge: Charge, seen: ProviderRefund, endpoints: list[WebhookEndpoint]) -> Refund:
    refund = Refund(
        id=new_id("re_"),
        charge=charge,
        amount=seen.amount,
        currency=charge.currency,
        status=ADOPTED[seen.status],
        reason=seen.reason,
        note=NOTE,
        source=Refund.Source.PROVIDER,
        actor=ACTOR,
        payment_intent=charge.payment_intent,
        provider_refund_id=seen.id,
        destination_reference=seen.reference,
        provider_idempotency_key=KEY_PREFIX + seen.id,  # never sent; unique: adopted once
        created_at=seen.created_at or timezone.now(),
        customer_email=charge.receipt_email,
    )
    book_refund_made_at_provider(refund, memo=NOTE, endpoints=endpoints)
    if refund.status in ADOPTED_TOLD:  # the customer hears of it as of one made here
        customer_mail.tell(refund, charge, ADOPTED_TOLD[refund.status])
    transaction.on_commit(lambda: metrics.count_refund_created(refund))
    return refund


ADOPTED_TOLD: dict[str, MailKind] = {
    Refund.Status.SUCCEEDED: MailKind.SUCCEEDED,
    Refund.Status.PENDING: MailKind.MADE,
}


def apply_held(charge_id: str, *, actor: str) -> list[str]:
    """A lead's resolution: the provider's refunds held on the charge adopted again, in
    the order they came, now that what was in the way has settled. Those that fit are
    adopted and the disagreement ends; one that still does not fit is held again. What
    happened to each, as outcome lines."""
    with transaction.atomic(durable=True):
        endpoints = live_endpoints()
        charge = charge_for_update(charge_id)
        if charge is None or not charge.provider_disagreement:
            return []
        held = [ProviderRefund(**item) for item in charge.provider_disagreement["held"]]
        charge.provider_disagreement = None
        charge.save(update_fields=["provider_disagreement", "updated_at"])
        outcomes = [adopt_locked(charge, seen, endpoints).outcome for seen in held]
    log.info("charge %s: %s applied the provider's held refunds: %s", charge_id, actor, outcomes)
    return outcomes
