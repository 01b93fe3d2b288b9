"""Charges the provider made arrive by themselves: a provider charge nobody here holds
(`charge.succeeded`, `charge.captured`, `charge.updated`, `charge.failed`, or a
`payment_intent.succeeded` with its latest charge) is written as the provider has it, in
the transaction that applies the event, so it is refundable within that request.

Its id is the provider's (as `import_charges` writes them), and it keeps the amount
captured (a partly captured charge arrives as what was taken), currency, customer,
PaymentIntent, description, metadata, status and created time. A captured charge is
`succeeded` with its `charge_succeeded` entry; a failed one `failed`; one authorised and
not yet captured `pending`, not refundable until its capture is told. It has no provider
key: it is never sent (`Charge.sent_here`). Each arrival writes the events our own
clients expect (`charge.succeeded`, `charge.failed`). The refunds it lists (`refunds`, on
the API versions that embed them) are adopted (`adoption`); those it does not list come
as refund events or through sync_provider.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from ledger_app.charges.import_files import ChargeRow, card_last4
from ledger_app.charges.models import PAYMENT_INTENT_ID, Charge
from ledger_app.charges.services import write_recorded
from ledger_app.errors import LedgerError
from ledger_app.mirror.objects import amount_of, created_of, id_of, is_id, lower, shown, text
from ledger_app.money import normalize_currency
from ledger_app.validation import validate_email_address, validate_metadata

ACTOR = "provider"
MAX_ID = 64  # Charge.id's length


def charged_amount(obj: dict[str, Any]) -> Any:
    """What the charge took from the customer: `amount_captured` once captured (a partial
    capture takes less than `amount`, never more), else `amount`."""
    amount, captured = amount_of(obj.get("amount")), amount_of(obj.get("amount_captured"))
    if obj.get("captured") is not True or amount is None or captured is None:
        return obj.get("amount")
    return min(captured, amount)


def read_charge(obj: dict[str, Any]) -> ChargeRow | str:
    """The provider's charge object as an arrival keeps it, or why it is not one."""
    charge_id = obj.get("id")
    if not is_id(charge_id) or len(charge_id) > MAX_ID:
        return f"its charge's id {shown(charge_id)} is not an id"
    amount = amount_of(charged_amount(obj))
    if amount is None:
        return f"charge {charge_id}'s amount {shown(obj.get('amount'))} is not one"
    try:
        currency = normalize_currency(lower(obj.get("currency")))
    except LedgerError:
        return f"charge {charge_id}'s currency {shown(obj.get('currency'))} is not one we know"
    status = _status(obj)
    if status is None:
        return f"charge {charge_id} is {shown(obj.get('status'))} at the provider: not arrived"
    payment_intent = id_of(obj.get("payment_intent"))
    customer = id_of(obj.get("customer"))
    return ChargeRow(
        charge_id=charge_id,
        amount=amount,
        currency=currency,
        status=status,
        customer=customer if is_id(customer) else "",
        payment_intent=payment_intent
        if isinstance(payment_intent, str) and PAYMENT_INTENT_ID.fullmatch(payment_intent)
        else "",
        description=text(obj.get("description"), 5_000),
        metadata=_metadata(obj.get("metadata")),
        created_at=created_of(obj),
        receipt_email=_receipt_email(obj),
        card_last4=card_last4(_card(obj).get("last4")),
    )


def _receipt_email(obj: dict[str, Any]) -> str:
    """Where the provider sent the charge's receipt (`receipt_email`); none when it has
    none, or one the mails could not go to (the charge still arrives)."""
    try:
        return validate_email_address(obj.get("receipt_email"), param="receipt_email")
    except LedgerError:
        return ""


def _card(obj: dict[str, Any]) -> dict[str, Any]:
    details = obj.get("payment_method_details")
    card = details.get("card") if isinstance(details, dict) else None
    return card if isinstance(card, dict) else {}


def _status(obj: dict[str, Any]) -> str | None:
    said = obj.get("status")
    if said == "failed":
        return Charge.Status.FAILED
    if said == "pending" or (said == "succeeded" and obj.get("captured") is False):
        return Charge.Status.PENDING  # authorised, not captured: nothing to refund yet
    if said == "succeeded":
        return Charge.Status.SUCCEEDED
    return None


def _metadata(value: Any) -> dict[str, str]:
    """The provider's metadata when it is metadata as we keep it (validation's rules);
    none otherwise: the charge still arrives."""
    try:
        return validate_metadata(value or {})
    except LedgerError:
        return {}


def arrive(seen: ChargeRow) -> tuple[Charge | None, str]:
    """Write the charge as the provider has it, inside the caller's transaction: the
    charge, its ledger entry and its event. (None, why) when another request wrote it a
    moment ago: its own event applied it."""
    try:
        with transaction.atomic():  # a savepoint: the same charge arriving twice at once
            charge = write_recorded(seen, ACTOR)
    except IntegrityError:
        return None, f"charge {seen.charge_id} arrived a moment ago"
    return charge, f"charge {seen.charge_id} arrived from the provider ({seen.status})"


def charge_of_payment_intent(obj: dict[str, Any]) -> dict[str, Any] | str:
    """A succeeded PaymentIntent's latest charge, as a charge object: the expanded one, or
    one made from the PaymentIntent's own fields (what it received is what was charged)."""
    latest = obj.get("latest_charge")
    if isinstance(latest, dict):
        return latest
    if obj.get("status") != "succeeded":
        return f"payment_intent {shown(obj.get('id'))} is {shown(obj.get('status'))}"
    if not is_id(latest):
        return f"payment_intent {shown(obj.get('id'))} names no latest charge"
    return {
        "id": latest,
        "object": "charge",
        "amount": obj.get("amount_received"),
        "currency": obj.get("currency"),
        "status": "succeeded",
        "captured": True,
        "customer": obj.get("customer"),
        "payment_intent": obj.get("id"),
        "description": obj.get("description"),
        "metadata": obj.get("metadata"),
        "created": obj.get("created"),
    }
