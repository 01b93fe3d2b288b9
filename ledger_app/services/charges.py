"""Recording charges that already exist at the provider (demo data, imports, tests)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger_app import errors
from ledger_app.models import Charge, LedgerEntry, new_charge_id
from ledger_app.money import normalize_currency, validate_amount
from ledger_app.services.ledger import append_entry


def record_charge(
    *,
    amount: int,
    currency: str,
    status: str = Charge.Status.SUCCEEDED,
    description: str = "",
    customer: str = "",
    metadata: dict[str, Any] | None = None,
    charge_id: str | None = None,
    created_at: datetime | None = None,
    actor: str = "",
) -> Charge:
    """Write a charge and, when it succeeded, its `charge_succeeded` ledger entry.

    Amount and currency are validated like every amount in the ledger: an int of minor
    units and a known ISO 4217 code, stored lower-case.
    """
    validate_amount(amount)
    currency = normalize_currency(currency)
    if status not in Charge.Status.values:
        raise errors.InvalidChargeStatus()
    with transaction.atomic(durable=True):
        charge = Charge.objects.create(
            id=charge_id or new_charge_id(),
            amount=amount,
            currency=currency,
            status=status,
            description=description,
            customer=customer,
            metadata=metadata or {},
            created_at=created_at or timezone.now(),
        )
        if status == Charge.Status.SUCCEEDED:
            append_entry(
                charge=charge,
                kind=LedgerEntry.Kind.CHARGE_SUCCEEDED,
                amount=amount,
                actor=actor,
            )
    return charge
