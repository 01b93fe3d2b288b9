"""Charges: captured through the gateway (create_charge) or recorded as they already are."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any, TypedDict, Unpack

from django.db import DatabaseError, transaction
from django.utils import timezone

from ledger_app import errors, faults
from ledger_app.charges.import_files import ChargeRow
from ledger_app.charges.models import Charge, new_charge_id, new_payment_intent_id
from ledger_app.db import drop_broken_connection
from ledger_app.events import services as events
from ledger_app.events.models import EventType, WebhookEndpoint
from ledger_app.idempotency import services as idempotency
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.idempotency.services import Created
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import append_entry
from ledger_app.money import normalize_currency, validate_amount, validate_within_ceiling
from ledger_app.provider.dispatch import send_charge
from ledger_app.provider.dispatch.pool import send_within_budget
from ledger_app.refunds.models import Refund
from ledger_app.validation import validate_email_address, validate_metadata, validate_text

log = logging.getLogger("ledger_app.charges")


class ChargeCustomer(TypedDict, total=False):
    """What create_charge may be told of the customer who pays."""

    receipt_email: str  # where their refund mails go (docs/customer-mails.md)


def create_charge(
    *,
    amount: int,
    currency: str,
    description: str = "",
    metadata: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    actor: str = "",
    **customer: Unpack[ChargeCustomer],
) -> Created[Charge]:
    """Create a charge and capture it through the gateway, with refunds' discipline.

    The charge is written `pending` with its own provider key (`charge:<id>`), minted
    once; the capture happens after that commit, with no lock held, and settles it to
    succeeded (with its ledger entry, which names `actor`), failed, or unknown on a
    timeout (the reconciler asks later). An idempotency key replays the same request and
    refuses a different one. An amount above the currency's ceiling
    (money.amount_ceiling) is refused with `amount_too_large` before the key is bound.
    """
    request = {
        "amount": amount,
        "currency": _checked_money(amount, currency),
        "description": validate_text(description, errors.InvalidDescription),
        "metadata": validate_metadata(metadata),
    }
    receipt_email = validate_email_address(customer.get("receipt_email"), param="receipt_email")
    if receipt_email:  # only then, so keys bound before it existed replay unchanged
        request["receipt_email"] = receipt_email
    keyed = idempotency.keyed_request(
        idempotency_key,
        IdempotencyRecord.Operation.CHARGE_CREATE,
        request,
        owner=idempotency.owner_of(actor),
    )
    charge_id = new_charge_id()
    legacy = idempotency.find_legacy_replay(keyed)  # a key from before keys had owners
    if legacy is not None:
        return legacy
    write = partial(_write_pending, {**request, "id": charge_id})
    result = idempotency.create_once(keyed, new_id=charge_id, write=write)
    if result.replayed:
        return result
    return Created(_capture(result.item, actor), replayed=False)


def _checked_money(amount: int, currency: str) -> str:
    """The amount checked (an int of minor units, at most the currency's ceiling) and the
    currency as it is stored (a known ISO 4217 code, lower-case)."""
    validate_amount(amount)
    currency = normalize_currency(currency)
    validate_within_ceiling(amount, currency)
    return currency


def _write_pending(fields: dict[str, Any]) -> Charge:
    """The new charge, pending with its own provider key, in create_once's transaction."""
    charge = Charge.objects.create(
        **fields,
        status=Charge.Status.PENDING,
        payment_intent=new_payment_intent_id(),
        provider_idempotency_key=f"charge:{fields['id']}",
    )
    faults.checkpoint("charge.create_locked")  # written, not yet committed
    return charge


def _capture(charge: Charge, actor: str) -> Charge:
    """One pass of the guarded send, after the charge committed, waited for at most
    REFUND_INLINE_WAIT_SECONDS (then the charge is answered pending and the send pool
    finishes it)."""
    faults.checkpoint("charge.created")  # committed, not yet sent
    try:
        charge = send_within_budget(partial(send_charge, actor=actor), charge.id, charge)
    except DatabaseError:
        log.exception("charge %s created; capture interrupted, reconcile retries it", charge.id)
        drop_broken_connection()
    faults.checkpoint("charge.settled")  # settled (or left to reconcile), client not told
    return charge


class ChargeDetails(TypedDict, total=False):
    """What record_charge may be told of a charge besides its amount, currency and status:
    each left out is blank, a new id, or now."""

    description: str
    customer: str
    metadata: dict[str, Any] | None
    charge_id: str | None
    created_at: datetime | None
    payment_intent: str | None
    receipt_email: str
    card_last4: str


def record_charge(
    *,
    amount: int,
    currency: str,
    status: str = Charge.Status.SUCCEEDED,
    actor: str = "",
    **details: Unpack[ChargeDetails],
) -> Charge:
    """Write a charge that already exists at the provider (demo data, imports), and its
    `charge_succeeded` ledger entry when it succeeded. Nothing is sent to the provider.

    Amount and currency are validated like every amount in the ledger: an int of minor
    units and a known ISO 4217 code, stored lower-case; the amount at most the currency's
    ceiling (`amount_too_large`), like a charge made through the API. It belongs to a
    new PaymentIntent unless `details` names one (`payment_intent`, "" for none).
    """
    currency = _checked_money(amount, currency)
    if status not in Charge.Status.values:
        raise errors.InvalidChargeStatus()
    payment_intent = details.get("payment_intent")
    with transaction.atomic(durable=True):
        return write_recorded(
            ChargeRow(
                charge_id=details.get("charge_id") or new_charge_id(),
                amount=amount,
                currency=currency,
                status=status,
                description=details.get("description", ""),
                customer=details.get("customer", ""),
                payment_intent=new_payment_intent_id()
                if payment_intent is None
                else payment_intent,
                metadata=details.get("metadata") or {},
                created_at=details.get("created_at"),
                receipt_email=validate_email_address(
                    details.get("receipt_email", ""), param="receipt_email"
                ),
                card_last4=details.get("card_last4", ""),
            ),
            actor,
        )


def write_recorded(row: ChargeRow, actor: str) -> Charge:
    """The one write of a charge that exists at the provider as it is there (record_charge,
    import_charges, a charge arriving from the provider), inside the caller's transaction:
    the charge, its `charge_succeeded` entry when it succeeded, and its event."""
    charge = Charge.objects.create(
        id=row.charge_id,
        amount=row.amount,
        currency=row.currency,
        status=row.status,
        description=row.description,
        customer=row.customer,
        payment_intent=row.payment_intent,
        metadata=row.metadata,
        created_at=row.created_at or timezone.now(),
        receipt_email=row.receipt_email,
        card_last4=row.card_last4,
    )
    _record_outcome(charge, actor)
    return charge


def _record_outcome(charge: Charge, actor: str) -> None:
    """A recorded charge's ledger entry (when it succeeded) and its event."""
    if charge.status == Charge.Status.SUCCEEDED:
        append_entry(
            charge=charge,
            kind=LedgerEntry.Kind.CHARGE_SUCCEEDED,
            amount=charge.amount,
            actor=actor,
        )
        events.record(EventType.CHARGE_SUCCEEDED, charge)
    elif charge.status == Charge.Status.FAILED:
        events.record(EventType.CHARGE_FAILED, charge)


def book_refund_made_at_provider(
    refund: Refund, *, memo: str, endpoints: list[WebhookEndpoint] | None = None
) -> Refund:
    """Write a refund the provider made itself (one an import found, one adopted from the
    provider's word: never sent), inside the caller's transaction, on its charge as the
    caller holds it: the refund, its `refund_reserved` entry (and `refund_succeeded` once
    it succeeded), the charge's new balance, and `refund.created` and `charge.refunded`,
    as a refund made here would be booked."""
    charge = refund.charge
    refund.save(force_insert=True)
    kinds = [LedgerEntry.Kind.REFUND_RESERVED]
    if refund.status == Refund.Status.SUCCEEDED:
        kinds.append(LedgerEntry.Kind.REFUND_SUCCEEDED)
    for kind in kinds:
        append_entry(
            charge=charge,
            refund=refund,
            kind=kind,
            amount=refund.amount,
            actor=refund.actor,
            memo=memo,
        )
    moved: dict[str, Any] = {"amount_refunded": charge.amount_refunded}
    charge.amount_refunded += refund.amount
    if charge.refunded:
        moved["refunded"] = False
    charge.save(update_fields=["amount_refunded", "updated_at"])
    events.record_many(
        [(EventType.REFUND_CREATED, refund, None), (EventType.CHARGE_REFUNDED, charge, moved)],
        endpoints=endpoints,
    )
    return refund
