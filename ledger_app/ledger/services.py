"""Appending ledger entries; the kind decides how amount_refunded moves."""

from __future__ import annotations

from typing import Any

from ledger_app.charges.models import Charge
from ledger_app.ledger.models import LedgerEntry
from ledger_app.refunds.models import Refund

REFUNDED_SIGN = {
    LedgerEntry.Kind.CHARGE_SUCCEEDED: 0,
    LedgerEntry.Kind.REFUND_RESERVED: 1,
    LedgerEntry.Kind.REFUND_SUCCEEDED: 0,
    LedgerEntry.Kind.REFUND_RELEASED: -1,
    LedgerEntry.Kind.DISPUTE_WITHDRAWN: 0,
    LedgerEntry.Kind.DISPUTE_FEE: 0,
    LedgerEntry.Kind.DISPUTE_REINSTATED: 0,
}


def append_entry(**fields: Any) -> LedgerEntry:
    """Write one entry (new_entry's arguments); call it inside the transaction that makes
    the state change."""
    entry = new_entry(**fields)
    entry.save()
    return entry


def new_entry(
    *,
    charge: Charge,
    kind: LedgerEntry.Kind,
    amount: int,
    refund: Refund | None = None,
    actor: str = "",
    memo: str = "",
) -> LedgerEntry:
    """The entry, not yet written (for a change that writes its rows together)."""
    return LedgerEntry(
        charge=charge,
        refund=refund,
        kind=kind,
        amount=amount,
        refunded_delta=REFUNDED_SIGN[kind] * amount,
        currency=charge.currency,
        actor=actor,
        memo=memo,
    )
