"""A dispute the provider tells of, by webhook (charge.dispute.*) or listed by
sync_provider: every value checked here (outside input), then kept on its charge, with its
money in the ledger, by ledger_app/disputes/services.py."""

from __future__ import annotations

import logging
from typing import Any, cast

from django.utils import timezone

from ledger_app.charges.models import DISPUTE_STATUSES, Charge
from ledger_app.charges.selectors import charges_for_update, known_to_the_provider_as
from ledger_app.disputes.models import Dispute
from ledger_app.disputes.services import DisputeSaid, Moved, record_dispute
from ledger_app.events.selectors import live_endpoints
from ledger_app.mirror.objects import Applied, charge_of, created_of, is_id, lower, shown, text

log = logging.getLogger("ledger_app.provider_events")


def apply_dispute(obj: dict[str, Any]) -> Applied:
    """A dispute the provider tells of (charge.dispute.*, or listed by sync_provider):
    kept on its charge, under the charge's lock, with its money in the ledger
    (disputes.services). The charge is the one the provider knows by the dispute's
    `charge`; a charge has at most one dispute, of at most its amount, in its currency.
    Its status is kept even when its money cannot be booked (a balance transaction in
    another currency, or not one): refunds are refused while it is open either way, and
    the books find the provider's movement missing in the ledger for a lead to look at."""
    dispute_id, charge_ref, status = obj.get("id"), charge_of(obj), obj.get("status")
    for field, value in (("id", dispute_id), ("charge", charge_ref)):
        if not is_id(value):
            return Applied(f"ignored: its dispute's {field} {shown(value)} is not an id", True)
    if status not in DISPUTE_STATUSES:
        return Applied(f"ignored: dispute {dispute_id}'s status {shown(status)} is not one", True)
    found = _disputed_charge(charge_ref)
    if found is None:
        return Applied(f"unknown charge {charge_ref} of dispute {dispute_id}")
    pk, charge_amount, charge_currency = found
    amount, currency = obj.get("amount"), lower(obj.get("currency"))
    if type(amount) is not int or not 0 < amount <= charge_amount or currency != charge_currency:
        return Applied(
            f"ignored: dispute {dispute_id} of {shown(amount)} {shown(currency)} does not fit "
            f"charge {pk} ({charge_amount} {charge_currency})",
            True,
        )
    # Its money, if it can be booked; its status and the refusal of refunds either way.
    moved = _dispute_money(obj.get("balance_transactions"), amount, charge_currency)
    said = DisputeSaid(
        id=cast(str, dispute_id),  # checked above
        amount=amount,
        status=status,
        reason=text(obj.get("reason"), 64),
        is_charge_refundable=obj.get("is_charge_refundable") is True,
        created=created_of(obj) or timezone.now(),
        moved=() if isinstance(moved, str) else moved,
    )
    endpoints = live_endpoints()  # read before the charge's lock, as every move does
    charge = charges_for_update().get(pk=pk)
    if charge.dispute_id and charge.dispute_id != dispute_id:
        return Applied(f"ignored: charge {charge.pk} is disputed as {charge.dispute_id}", True)
    if Dispute.objects.filter(pk=said.id).exclude(charge=charge).exists():
        return Applied(f"ignored: dispute {said.id} is another charge's", True)
    outcome, changed = record_dispute(charge, said, endpoints)
    if isinstance(moved, str):  # kept, and said: the books find its money missing here
        log.warning("dispute %s: its money is not booked: %s", said.id, moved)
        return Applied(f"{outcome}; its money not booked: {moved}", ignored=True, moved=changed)
    return Applied(outcome, moved=changed)


# A dispute's money, as Stripe lists it: zero, one or two balance transactions.
MAX_DISPUTE_MOVES = 2
MAX_DISPUTE_FEE = 1_000_000


def _dispute_money(listed: Any, amount: int, currency: str) -> tuple[Moved, ...] | str:
    """The dispute's balance transactions, withdrawals first, or why they are not its."""
    if listed is None:
        return ()
    if not isinstance(listed, list) or len(listed) > MAX_DISPUTE_MOVES:
        return "its balance_transactions are not a list of at most two"
    moves = []
    for item in listed:
        if not isinstance(item, dict) or not is_id(item.get("id")):
            return "a balance transaction of it has no id"
        moved, fee, created = item.get("amount"), item.get("fee", 0), item.get("created", 0)
        if type(moved) is not int or not 0 < abs(moved) <= amount:
            return f"balance transaction {item['id']} moves {shown(moved)}, not within {amount}"
        # A reinstatement may give the fee back (a negative fee): only a withdrawal's is kept.
        if type(fee) is not int or not abs(fee) <= MAX_DISPUTE_FEE or type(created) is not int:
            return f"balance transaction {item['id']} has a fee or time that is not one"
        if moved < 0 and fee < 0:
            return f"balance transaction {item['id']} withdraws with a negative fee"
        if lower(item.get("currency", currency)) != currency:
            return f"balance transaction {item['id']} is not in {currency}"
        moves.append(Moved(item["id"], moved, fee if moved < 0 else 0, created))
    return tuple(sorted(moves, key=lambda move: move.amount))


def _disputed_charge(charge_ref: str) -> tuple[str, int, str] | None:
    """The pk, amount and currency of the charge the provider knows as `charge_ref`, read
    before its lock: a charge's amount and currency never change."""
    known = Charge.objects.filter(known_to_the_provider_as(charge_ref))
    return known.values_list("pk", "amount", "currency").first()
