"""A PaymentIntent as Stripe shapes it, as far as the ledger knows it: read from its
charges (the latest: its succeeded one, else the newest). Every field of Stripe's object
is there (stripe_fields_2026-11-18.json), null where the ledger holds nothing; the
versions before 2022-11-15 also carry `charges` (api_versions.embeds_charges)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ledger_app import api_versions
from ledger_app.charges.models import Charge, MovementStatus
from ledger_app.refunds.selectors import with_first_refunds
from ledger_app.rendering.charges import EMBEDDED_REFUNDS, FAILURE_CODE
from ledger_app.rendering.fields import (
    FALSE,
    NULL_INTEGER,
    NULL_OBJECT,
    ExpandableId,
    Fixed,
    fixed_fields,
    shown_metadata,
    unix,
)
from ledger_app.rendering.snapshots import object_snapshot

# A PaymentIntent's status from its latest charge's.
INTENT_STATUS: dict[str, str] = {
    MovementStatus.SUCCEEDED: "succeeded",
    MovementStatus.FAILED: "requires_payment_method",  # declined: the customer tries again
    MovementStatus.PENDING: "processing",
    MovementStatus.UNKNOWN: "processing",
}
# How many of its charges a PaymentIntent shows in versions before 2022-11-15.
EMBEDDED_CHARGES = 10
NULL_LIST = {"type": "array", "items": {"type": "string"}, "nullable": True}


def _last_payment_error(charge: Charge) -> dict[str, Any] | None:
    """A declined latest charge's error, as Stripe's PaymentIntent shows it."""
    if charge.status != Charge.Status.FAILED:
        return None
    detail = charge.status_detail
    error: dict[str, Any] = {"charge": charge.id, "type": "card_error"}
    if FAILURE_CODE.match(detail):
        error["code"] = detail
    error["message"] = detail or "The card was declined."
    return error


def render_payment_intent(charge: Charge, *, charges: list[Charge] | None = None) -> dict[str, Any]:
    """The PaymentIntent of `charge` (its latest charge) in today's shape; `charges`
    (newest first, EMBEDDED_CHARGES + 1 at most) for the versions that carry them."""
    shown = dict(INTENT_FIELDS if charges is None else INTENT_FIELDS_WITH_CHARGES)
    if charges is not None:
        shown["charges"] = {
            "object": "list",
            "data": [object_snapshot(c) for c in charges[:EMBEDDED_CHARGES]],
            "has_more": len(charges) > EMBEDDED_CHARGES,
            "url": f"/v1/charges?payment_intent={charge.payment_intent}",
        }
    succeeded = charge.status == Charge.Status.SUCCEEDED
    shown.update(
        id=charge.payment_intent,
        amount=charge.amount,
        amount_received=charge.amount if succeeded else 0,
        created=unix(charge.created_at),
        currency=charge.currency,
        customer=charge.customer or None,
        description=charge.description or None,
        last_payment_error=_last_payment_error(charge),
        latest_charge=charge.id,
        metadata=shown_metadata(charge.metadata),
        payment_method_types=["card"],
        status=INTENT_STATUS[charge.status],
    )
    return shown


def intent_charges(charge: Charge, using: str) -> list[Charge]:
    """The charges a PaymentIntent carries in versions before 2022-11-15: its newest
    EMBEDDED_CHARGES + 1 (one more tells has_more), each with the refunds it embeds."""
    charges = list(
        Charge.objects.using(using)
        .filter(payment_intent=charge.payment_intent)
        .order_by("-created_at", "-id")[: EMBEDDED_CHARGES + 1]
    )
    return with_first_refunds(charges, EMBEDDED_REFUNDS + 1)


def payment_intent_in(charge: Charge, version: str, using: str = "default") -> dict[str, Any]:
    """The PaymentIntent of its latest charge `charge`, with what `version` carries."""
    if not api_versions.embeds_charges(version):
        return render_payment_intent(charge)
    return render_payment_intent(charge, charges=intent_charges(charge, using))


class PaymentIntentSerializer(serializers.Serializer):
    """A PaymentIntent as the ledger knows it, read from its latest charge (the succeeded
    one, else the newest): its amount, currency, status, latest_charge and metadata (the
    charge's); Stripe's other fields null, or their only value here."""

    id = serializers.CharField()
    object = Fixed("payment_intent", {"type": "string"})
    allowed_payment_method_types = Fixed(schema=NULL_LIST)
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_capturable = Fixed(0, {"type": "integer"})
    amount_received = serializers.IntegerField()
    application = Fixed()
    application_fee_amount = Fixed(schema=NULL_INTEGER)
    automatic_payment_methods = Fixed(schema=NULL_OBJECT)
    canceled_at = Fixed(schema=NULL_INTEGER)
    cancellation_reason = Fixed()
    capture_method = Fixed("automatic", {"type": "string"})
    client_secret = Fixed()
    confirmation_method = Fixed("automatic", {"type": "string"})
    created = serializers.IntegerField()
    currency = serializers.CharField()
    customer = Fixed()
    customer_account = Fixed()
    description = Fixed()
    excluded_payment_method_types = Fixed(schema=NULL_LIST)
    last_payment_error = Fixed(schema=NULL_OBJECT)
    latest_charge = ExpandableId("Charge")
    livemode = Fixed(False, FALSE)
    managed_payments = Fixed(schema=NULL_OBJECT)
    metadata = serializers.DictField(child=serializers.CharField())
    next_action = Fixed(schema=NULL_OBJECT)
    on_behalf_of = Fixed()
    payment_method = Fixed()
    payment_method_configuration_details = Fixed(schema=NULL_OBJECT)
    payment_method_options = Fixed(schema=NULL_OBJECT)
    payment_method_types = Fixed(["card"], {"type": "array", "items": {"type": "string"}})
    payment_record = Fixed()
    processing = Fixed(schema=NULL_OBJECT)
    receipt_email = Fixed()
    review = Fixed()
    setup_future_usage = Fixed()
    shipping = Fixed(schema=NULL_OBJECT)
    source = Fixed()  # type: ignore[assignment]  # Stripe's field, declared (the metaclass takes it off the class)
    statement_descriptor = Fixed()
    statement_descriptor_suffix = Fixed()
    status = serializers.CharField(
        help_text="succeeded, processing (its charge's outcome not known yet), or "
        "requires_payment_method (its charge was declined)."
    )
    transfer_data = Fixed(schema=NULL_OBJECT)
    transfer_group = Fixed()

    def to_representation(self, instance: Charge) -> dict[str, Any]:
        return render_payment_intent(instance)


def _with_charges(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `charges` where the versions before 2022-11-15 show it (by name, as
    Stripe orders its fields: after capture_method)."""
    names = list(fields)
    at = names.index("capture_method") + 1
    return {name: fields.get(name) for name in [*names[:at], "charges", *names[at:]]}


# What render_payment_intent starts from: the serializer's fields in order, the fixed ones set.
INTENT_FIELDS = fixed_fields(PaymentIntentSerializer)
INTENT_FIELDS_WITH_CHARGES = _with_charges(INTENT_FIELDS)
