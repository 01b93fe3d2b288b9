"""A dispute the provider told of, kept under its charge's lock: the dispute itself, its
money in the ledger, and its news to our webhook endpoints.

Its money is what the provider's balance transactions of it say (the dispute object's
`balance_transactions`): a withdrawal (negative: the disputed amount, and the dispute fee
the provider kept) is booked as `dispute_withdrawn` and `dispute_fee` entries, a
reinstatement (positive, when the dispute is won) as `dispute_reinstated`; each under the
balance transaction's id, once. A charge has one dispute, so at most one withdrawal and
one reinstatement, and a reinstatement only after a withdrawal. None of them moves
amount_refunded: a dispute is not a refund.

Events: charge.dispute.created on its first word (and charge.updated, `disputed` now
true), .updated when an open dispute's status moves, .closed when it ends, and
.funds_withdrawn / .funds_reinstated with its money.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from ledger_app.charges.models import OPEN_DISPUTE_STATUSES, Charge
from ledger_app.disputes.models import Dispute
from ledger_app.events import services as events
from ledger_app.events.models import EventType, WebhookEndpoint
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import new_entry

ACTOR = "provider:dispute"


@dataclass(frozen=True)
class Moved:
    """One of the provider's balance transactions of a dispute, as checked at the door."""

    id: str
    amount: int  # negative: withdrawn; positive: reinstated
    fee: int
    created: int


@dataclass(frozen=True)
class DisputeSaid:
    id: str
    amount: int
    status: str
    reason: str
    is_charge_refundable: bool
    created: datetime
    moved: tuple[Moved, ...]


def record_dispute(
    charge: Charge, said: DisputeSaid, endpoints: list[WebhookEndpoint]
) -> tuple[str, bool]:
    """Apply what the provider says of the locked charge's dispute; what it did, and
    whether anything moved."""
    dispute = Dispute.objects.filter(pk=said.id).first()
    first = dispute is None
    before = charge.dispute_status or "none"
    if dispute is None:
        dispute = Dispute(id=said.id, charge=charge, amount=said.amount, currency=charge.currency)
        dispute.created_at = said.created
    dispute.status, dispute.reason = said.status, said.reason
    dispute.is_charge_refundable = said.is_charge_refundable
    booked = _book(charge, dispute, said.moved)
    dispute.balance_transactions = [*dispute.balance_transactions, *booked.told]
    dispute.save()
    charge.dispute_id, charge.dispute_status = said.id, said.status
    # The provider's word that the charge may still be refunded holds only in an inquiry
    # (warning_*) that took no money: once funds are withdrawn a refund would pay twice,
    # whatever an older or replayed event says.
    charge.dispute_refundable = (
        said.is_charge_refundable and said.status.startswith("warning_") and not booked.withdrawn
    )
    charge.save(update_fields=["dispute_id", "dispute_status", "dispute_refundable", "updated_at"])
    changes = [(kind, dispute) for kind in _news(first, before, said.status)]
    changes += [(kind, dispute) for kind in booked.news]
    if first:
        events.record_many(
            [(EventType.CHARGE_UPDATED, charge, {"disputed": False})], endpoints=endpoints
        )
    if changes:
        events.record_disputed(changes, endpoints=endpoints)
    money = "".join(f", {kind.label.lower()}" for kind in booked.news)
    moved = before != said.status or bool(booked.news)
    went = f"{before} -> {said.status}" if before != said.status else said.status
    return f"charge {charge.pk}: dispute {said.id} {went}{money or ''}", moved


def _news(first: bool, before: str, status: str) -> list[EventType]:
    if first:
        return [EventType.DISPUTE_CREATED]
    if before == status:
        return []
    if status in OPEN_DISPUTE_STATUSES:
        return [EventType.DISPUTE_UPDATED]
    return [EventType.DISPUTE_CLOSED]


@dataclass
class _Booked:
    told: list[dict[str, object]]
    news: list[EventType]
    withdrawn: bool = False  # the charge's dispute money was withdrawn, now or before


def _book(charge: Charge, dispute: Dispute, moved: tuple[Moved, ...]) -> _Booked:
    """The ledger entries of the balance transactions not booked yet."""
    kinds = set(
        LedgerEntry.objects.filter(charge=charge, kind__startswith="dispute_").values_list(
            "kind", flat=True
        )
    )
    booked = _Booked([], [])
    entries = []
    memo = f"dispute {dispute.id}"
    for item in moved:
        withdrawn = item.amount < 0
        kind = (
            LedgerEntry.Kind.DISPUTE_WITHDRAWN if withdrawn else LedgerEntry.Kind.DISPUTE_REINSTATED
        )
        if kind in kinds or (not withdrawn and LedgerEntry.Kind.DISPUTE_WITHDRAWN not in kinds):
            continue  # booked already; or a reinstatement of nothing withdrawn
        if LedgerEntry.objects.filter(balance_transaction=item.id).exclude(charge=charge).exists():
            continue  # another charge's: the books find it where it is
        kinds.add(kind)
        made = [
            new_entry(charge=charge, kind=kind, amount=abs(item.amount), actor=ACTOR, memo=memo)
        ]
        if withdrawn and item.fee > 0:
            fee = LedgerEntry.Kind.DISPUTE_FEE
            made.append(new_entry(charge=charge, kind=fee, amount=item.fee, actor=ACTOR, memo=memo))
        for entry in made:
            entry.balance_transaction = item.id  # the provider's, booked once (a constraint)
        entries += made
        booked.told.append(
            {
                "id": item.id,
                "amount": item.amount,
                "fee": item.fee,
                "created": item.created,
                "reporting_category": "dispute" if withdrawn else "dispute_reversal",
            }
        )
        booked.news.append(
            EventType.DISPUTE_FUNDS_WITHDRAWN if withdrawn else EventType.DISPUTE_FUNDS_REINSTATED
        )
    now = timezone.now()  # one moment for all: a withdrawal and its fee share their day
    for entry in entries:
        entry.created_at = now
    LedgerEntry.objects.bulk_create(entries)
    booked.withdrawn = LedgerEntry.Kind.DISPUTE_WITHDRAWN in kinds
    return booked
