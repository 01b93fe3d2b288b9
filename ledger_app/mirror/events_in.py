"""What the payment provider tells us later, by webhook: applied at most once per event,
and only to the refund (or charge) the event's object is.

A refund the provider reports `succeeded` or `failed` (or `canceled`) settles as it says,
including a refund that succeeded and later failed (a closed or expired card): that one
moves to `failed`, its amount is released with a ledger entry, `refund.failed` is
appended, and it joins the support queue. Anything still in flight at the provider
(`pending`, `requires_action`) changes nothing, so an older event arriving after a newer
one cannot move a refund backwards. Charges likewise.

Which refund an object is (`_not_this`, under the rows' locks): the one holding its
provider id; or, while a refund has no provider id yet, the one its
`metadata.ledger_refund_id` names, if the object's charge, amount and currency are that
refund's. A succeeded refund's event may carry its card reference (ARN) in
`destination_details`: a refund that has none yet keeps it (`settle_locked_refund`). An
event about anything else is acknowledged, stored and changes nothing. The
event is stored in the same transaction as its effect, so it is applied at most once and
a failed effect leaves it to be sent again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from django.db import IntegrityError, transaction

from ledger_app.charges.models import Charge, ProviderMovement
from ledger_app.charges.selectors import charges_for_update, known_to_the_provider_as
from ledger_app.events.models import WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.mirror import adoption, arrivals
from ledger_app.mirror.arrivals import charged_amount
from ledger_app.mirror.books_in import apply_balance_transaction
from ledger_app.mirror.disputes_in import apply_dispute
from ledger_app.mirror.objects import (
    Applied,
    charge_of,
    is_id,
    lower,
    metadata_of,
    shown,
    text,
)
from ledger_app.provider.card_references import card_reference
from ledger_app.provider.dispatch import (
    Outcome,
    refund_for_update,
    settle_locked_charge,
    settle_locked_refund,
)
from ledger_app.provider.models import ProviderEvent
from ledger_app.refunds.models import Refund
from ledger_app.text import has_unstorable_characters

log = logging.getLogger("ledger_app.provider_events")

ACTOR = "provider:webhook"
DUPLICATE = "duplicate: already applied"
# An event's id: Stripe's prefix and letters, digits or underscores (objects.OBJECT_ID).
EVENT_ID = re.compile(r"evt_[A-Za-z0-9_]{1,251}")
# A provider's event nests a handful of levels; far past that it is not one, and storing
# it must stay clear of Python's recursion limit.
MAX_DEPTH = 64
# The provider's statuses that are its final word; anything else is still in flight.
REFUND_FINAL = {"succeeded": Refund.Status.SUCCEEDED, "failed": Refund.Status.FAILED}
REFUND_FINAL["canceled"] = Refund.Status.FAILED
CHARGE_FINAL = {"succeeded": Charge.Status.SUCCEEDED, "failed": Charge.Status.FAILED}


@dataclass(frozen=True)
class Kind:
    name: str
    model: type[Refund] | type[Charge]
    final: Mapping[str, str]
    reason_field: str  # where the provider says why it failed
    ledger_key: str  # the metadata key that carries our id
    names_charge: bool  # the object says which charge it belongs to (a refund does)


KINDS = {
    "refund": Kind("refund", Refund, REFUND_FINAL, "failure_reason", "ledger_refund_id", True),
    "charge": Kind("charge", Charge, CHARGE_FINAL, "failure_code", "ledger_charge_id", False),
}


def apply_provider_event(event: Any) -> str:
    """Apply one provider event (Stripe's shape: id, type, data.object) at most once, and
    say what it did. An id that is not an event id is acknowledged and nothing is written
    (it cannot be stored, and no resend could ever be applied); a repeat of a stored event
    changes nothing."""
    event_id = event.get("id") if isinstance(event, dict) else None
    if not (isinstance(event_id, str) and EVENT_ID.fullmatch(event_id)):
        log.warning("provider event not stored: %s is not an event id", shown(event_id))
        return "ignored: not a provider event id"
    if _deeper_than(event, MAX_DEPTH):
        log.warning("provider event %s not stored: nested too deep", event_id)
        return "ignored: nested too deep"
    if ProviderEvent.objects.filter(pk=event_id).exists():
        return DUPLICATE
    event_type = text(event.get("type"), 100)
    with transaction.atomic(durable=True):
        # The event's row first, as an idempotency key is taken first: the same event
        # delivered twice at once waits here, then finds it.
        try:
            with transaction.atomic():
                stored = ProviderEvent.objects.create(
                    id=event_id, type=event_type, payload=_storable(event)
                )
        except IntegrityError:
            return DUPLICATE
        applied = apply_object(_object_of(event))
        stored.outcome = applied.outcome
        stored.save(update_fields=["outcome"])
    if applied.ignored:
        log.warning("provider event %s (%s) %s", event_id, event_type, applied.outcome)
    else:
        log.info("provider event %s (%s): %s", event_id, event_type, applied.outcome)
    return applied.outcome


def apply_object(obj: dict[str, Any]) -> Applied:
    """What the provider says of one object (an event's, or one sync_provider listed),
    applied inside the caller's transaction: a dispute; a balance transaction; a
    PaymentIntent's latest charge; a charge, and the refunds it lists; a refund."""
    said_kind = obj.get("object")
    if said_kind == "dispute":
        return apply_dispute(obj)
    if said_kind == "balance_transaction":
        return apply_balance_transaction(obj)
    if said_kind == "payment_intent":
        latest = arrivals.charge_of_payment_intent(obj)
        if isinstance(latest, str):
            return Applied(f"ignored: {latest}")
        obj = latest
    applied = _apply(obj)
    listed = obj.get("refunds") if obj.get("object") == "charge" and not applied.ignored else None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return applied
    charge_ref = obj["id"]
    each = [applied] + [
        _apply({**item, "charge": charge_ref}) for item in data if isinstance(item, dict)
    ]
    return Applied("; ".join(one.outcome for one in each), moved=any(one.moved for one in each))


def _apply(obj: dict[str, Any]) -> Applied:
    said_kind = obj.get("object")
    kind = KINDS.get(said_kind) if isinstance(said_kind, str) else None
    if kind is None:
        return Applied(f"ignored: {shown(said_kind or 'no')} object")
    provider_id, named = obj.get("id"), metadata_of(obj).get(kind.ledger_key)
    not_an_id = _not_an_id(kind, obj, provider_id, named)
    if not_an_id:
        return Applied(f"ignored: {not_an_id}", True)
    provider_id = cast(str, provider_id)  # checked above: an id
    found = _candidate(kind, provider_id, named)
    if found is None and named is not None and kind.name == "charge":
        # Made by a back office (our metadata), but not this one: another installation
        # on the same account. Not taken in as the provider's own.
        return Applied(f"ignored: charge {provider_id} names {named}, which is not here", True)
    if found is None:
        doubt = f"its metadata names {named}, which is not here" if named is not None else ""
        return _arrive_or_adopt(obj) if kind.name == "charge" else _adopt(obj, doubt)
    if isinstance(found, str):
        return Applied(f"ignored: {found}", True)
    pk, charge_id = found
    charge, item, endpoints = _locked(kind, pk, charge_id)
    why = _not_this(kind, obj, item, charge)
    if why:
        return Applied(f"ignored: {why}", True)
    said = obj.get("status")
    status = kind.final.get(said) if isinstance(said, str) else None
    if not kind.names_charge and obj.get("captured") is False:
        status = None  # authorised, not captured: its capture is the news that counts
    if status is None:
        return Applied(f"{kind.name} {item.pk}: provider says {shown(said)}; nothing changes")
    # A refund's card reference (ARN), guarded there: refund.updated carries it when the
    # card network gives it; the settle records it on a succeeded refund that has none.
    reference = card_reference(obj.get("destination_details")) if kind.names_charge else ""
    outcome = Outcome(status, provider_id, _reason(obj, kind.reason_field), reference)
    return _settle(kind, charge, item, outcome, endpoints)


def _arrive_or_adopt(obj: dict[str, Any]) -> Applied:
    """A charge nobody here holds: it arrives (arrivals)."""
    seen = arrivals.read_charge(obj)
    if isinstance(seen, str):
        return Applied(f"ignored: {seen}", True)
    charge, outcome = arrivals.arrive(seen)
    return Applied(outcome, moved=charge is not None)


def _adopt(obj: dict[str, Any], doubt: str) -> Applied:
    """A refund nobody here holds: made at the provider, adopted (adoption); held for a
    lead instead when its metadata names a refund of ours that is not here (`doubt`)."""
    seen = adoption.read_refund(obj)
    if isinstance(seen, str):
        return Applied(f"ignored: {seen}", True)
    return adoption.adopt(seen, doubt=doubt)


def _locked(
    kind: Kind, pk: str, charge_id: str
) -> tuple[Charge, Refund | Charge, list[WebhookEndpoint]]:
    """The charge and the item the event is about (the charge itself, or one of its
    refunds), locked; for a refund, the live webhook endpoints, read before the locks."""
    if not kind.names_charge:
        charge = charges_for_update().get(pk=pk)
        return charge, charge, []
    endpoints = live_endpoints()  # not the charge's: read before its lock is taken
    charge, refund = refund_for_update(charge_id=charge_id, refund_id=pk)
    return charge, refund, endpoints


def _settle(
    kind: Kind,
    charge: Charge,
    item: Refund | Charge,
    outcome: Outcome,
    endpoints: list[WebhookEndpoint],
) -> Applied:
    """The provider's final word on the locked item, settled (a refund's as a reversal:
    a succeeded one may still fail), and what moved."""
    before, noted = item.status, ""
    after: Refund | Charge
    if isinstance(item, Refund):
        had = item.destination_reference
        after = settle_locked_refund(
            charge=charge,
            refund=item,
            outcome=outcome,
            actor=ACTOR,
            reversal=True,
            endpoints=endpoints,
        )
        noted = ", card reference recorded" if after.destination_reference != had else ""
    else:
        after = settle_locked_charge(charge=charge, outcome=outcome, actor=ACTOR)
    moved = before != after.status or bool(noted)
    return Applied(f"{kind.name} {item.pk}: {before} -> {after.status}{noted}", moved=moved)


def _not_an_id(kind: Kind, obj: dict[str, Any], provider_id: Any, named: Any) -> str | None:
    """Which of the object's ids is none, checked before any query names them: an id too
    long or with a NUL is no id."""
    ids = [("id", provider_id, True), (f"metadata.{kind.ledger_key}", named, False)]
    if kind.names_charge:
        ids.append(("charge", charge_of(obj), False))
    for field, value, required in ids:
        if (required or value is not None) and not is_id(value):
            return f"its {kind.name}'s {field} {shown(value)} is not an id"
    return None


def _candidate(kind: Kind, provider_id: str, named: str | None) -> tuple[str, str] | str | None:
    """(pk, charge id) of the refund or charge the object may be, read without locks: the
    one holding its provider id, else the one its metadata names; a string says why none
    can be chosen."""
    columns = ("pk", "charge_id") if kind.names_charge else ("pk", "pk")
    holding = kind.model.objects.filter(**{kind.model.provider_id_field: provider_id})
    if not kind.names_charge:  # a charge that arrived, or was imported, has the provider's id
        holding = Charge.objects.filter(known_to_the_provider_as(provider_id))
    rows = list(holding.values_list(*columns)[:2])
    if len(rows) > 1:
        return f"more than one {kind.name} holds provider id {provider_id}"
    if rows:
        return cast("tuple[str, str]", rows[0])
    if named is None:
        return None
    return kind.model.objects.filter(pk=named).values_list(*columns).first()


def _not_this(kind: Kind, obj: dict[str, Any], item: ProviderMovement, charge: Charge) -> str:
    """Why the provider's object is not this refund (or charge), read on its locked row;
    empty when it is. It is the one holding its provider id (any metadata naming no other,
    any charge, amount and currency stated agreeing); or one with no provider id yet that
    its metadata names, with the same charge, amount and currency. Every event type comes
    through here: the kind is the object's, not the event's."""
    what, provider_id = f"{kind.name} {item.pk}", obj["id"]
    named = metadata_of(obj).get(kind.ledger_key)
    if item.provider_id and item.provider_id != provider_id:
        return f"{what} is {item.provider_id} at the provider, not {provider_id}"
    if named is not None and named != item.pk:
        return f"{provider_id} is {what}, but its metadata names {named}"
    if not item.provider_id and named is None and item.pk != provider_id:
        return f"{what} has no provider id and the event's metadata names none"
    facts: list[tuple[str, object, object]] = [
        ("amount", item.amount, obj.get("amount") if kind.names_charge else charged_amount(obj)),
        ("currency", item.currency, lower(obj.get("currency"))),
    ]
    if kind.names_charge:
        facts.append(("charge", charge.provider_reference, charge_of(obj)))
    for field, ours, theirs in facts:
        if theirs is None and item.provider_id:
            continue  # its provider id says which it is; a fact left out is no conflict
        if type(theirs) is not type(ours) or theirs != ours:
            return f"{what}'s {field} is {ours}, the event's {shown(theirs)}"
    return ""


def _object_of(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    return obj if isinstance(obj, dict) else {}


def _reason(obj: dict[str, Any], field: str) -> str:
    said = obj.get("status")
    if said in ("failed", "canceled"):
        reason = obj.get(field)
        return text(reason if isinstance(reason, str) and reason else said, 255)
    return ""


def _storable(value: Any) -> Any:
    """The event as received, but with text PostgreSQL cannot store (NUL, lone
    surrogates) replaced, so that it can be kept as the record of what came."""
    if isinstance(value, str):
        if not has_unstorable_characters(value):
            return value
        return value.encode("utf-8", "replace").decode().replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_storable(str(key)): _storable(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_storable(inner) for inner in value]
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    level = [value]
    for _ in range(limit):
        level = [
            inner
            for outer in level
            if isinstance(outer, dict | list)
            for inner in (outer.values() if isinstance(outer, dict) else outer)
        ]
        if not level:
            return False
    return True
