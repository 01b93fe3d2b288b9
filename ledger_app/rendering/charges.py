"""A charge as Stripe shapes it: ChargeSerializer's declared fields are its OpenAPI
schema, render_charge draws it, with its newest refunds embedded in the API versions
before 2022-11-15 or with expand[]=refunds (rendering/fields.py says what Stripe's fields
and values here are)."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund
from ledger_app.rendering.fields import (
    FALSE,
    LEDGER_STATUS_HELP,
    NULL_INTEGER,
    NULL_OBJECT,
    BlankAsNull,
    ExpandableId,
    Fixed,
    StripeList,
    StripeObject,
    fixed_fields,
    shown_metadata,
    shown_status,
    unix,
)
from ledger_app.rendering.refunds import RefundListSerializer, render_refund

# How many of a charge's refunds it shows, newest first: has_more and url page on.
EMBEDDED_REFUNDS = 10
EXPANDED_REFUNDS = 100  # with expand[]=refunds
# A failed charge's status_detail that is a provider's code (card_declined), not prose.
FAILURE_CODE = re.compile(r"^[a-z][a-z0-9_]{0,99}\Z")
NO_ADDRESS = dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state"))
NO_BILLING_DETAILS: dict[str, Any] = {
    "address": NO_ADDRESS,
    "email": None,
    "name": None,
    "phone": None,
    "tax_id": None,
}


class ChargeSerializer(StripeObject):
    """A charge. Its `refunds` are shown only when the context's `embed_refunds` says so
    (API versions before 2022-11-15, or expand[]=refunds; see api_versions.py)."""

    OPTIONAL_FIELDS = ("refunds",)  # left out in current versions unless expanded

    id = serializers.CharField()
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_captured = serializers.IntegerField(read_only=True)
    amount_refunded = serializers.IntegerField()
    application = Fixed()
    application_fee = Fixed()
    application_fee_amount = Fixed(schema=NULL_INTEGER)
    balance_transaction = Fixed()
    billing_details = Fixed(NO_BILLING_DETAILS, {"type": "object"})
    calculated_statement_descriptor = Fixed()
    captured = serializers.BooleanField(read_only=True)
    created = serializers.IntegerField(read_only=True)
    currency = serializers.CharField()
    customer = BlankAsNull()
    description = BlankAsNull()
    disputed = serializers.BooleanField(
        read_only=True, help_text="Whether the provider told of a dispute of it (open or closed)."
    )
    failure_balance_transaction = Fixed()
    failure_code = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="A failed charge's code from the provider (card_declined), when it gave one.",
    )
    failure_message = serializers.CharField(read_only=True, allow_null=True)
    fraud_details = Fixed({}, {"type": "object"})
    livemode = Fixed(False, FALSE)
    metadata = serializers.DictField(child=serializers.CharField())
    on_behalf_of = Fixed()
    outcome = Fixed(schema=NULL_OBJECT)
    paid = serializers.BooleanField(read_only=True)
    payment_intent = ExpandableId(
        "PaymentIntent", help_text="The PaymentIntent (pi_...) it belongs to, if any."
    )
    payment_method = Fixed()
    payment_method_details = Fixed(schema=NULL_OBJECT)
    receipt_email = BlankAsNull(help_text="Where the customer's refund mails go, if anywhere.")
    receipt_number = Fixed()
    receipt_url = Fixed()
    refunded = serializers.BooleanField()
    refunds = RefundListSerializer(
        read_only=True,
        help_text=f"The charge's {EMBEDDED_REFUNDS} newest refunds ({EXPANDED_REFUNDS} with "
        "expand[]=refunds); has_more says whether there are others, and url lists them all.",
    )
    review = Fixed()
    shipping = Fixed(schema=NULL_OBJECT)
    source = Fixed(schema=NULL_OBJECT)  # type: ignore[assignment]  # Stripe's field, declared (the metaclass takes it off the class)
    source_transfer = Fixed()
    statement_descriptor = Fixed()
    statement_descriptor_suffix = Fixed()
    status = serializers.CharField(
        read_only=True,
        help_text="pending, succeeded or failed; pending also while the capture's outcome "
        "is unknown (ledger_status unknown).",
    )
    transfer_data = Fixed(schema=NULL_OBJECT)
    transfer_group = Fixed()
    ledger_status = serializers.CharField(source="status", help_text=LEDGER_STATUS_HELP)

    def to_representation(self, instance: Charge) -> dict[str, Any]:
        if not self.context.get("embed_refunds", True):
            return render_charge(instance)
        expanded = "refunds" in self.context.get("expand", ())
        size = EXPANDED_REFUNDS if expanded else EMBEDDED_REFUNDS
        # A list's charges come with theirs (selectors.with_first_refunds), enough of them
        # when they number one more than shown
        refunds = getattr(instance, "first_refunds", None)
        if getattr(instance, "first_refunds_count", 0) <= size:
            refunds = None
        if refunds is None:
            refunds = read_newest_refunds(instance, size + 1)
        return render_charge(instance, refunds=refund_list(instance, refunds, size))


def render_charge(charge: Charge, *, refunds: dict[str, Any] | None = None) -> dict[str, Any]:
    """A charge as the API shows it: ChargeSerializer's fields, in their order, each
    container new; `refunds` (refund_list's) only when it embeds them."""
    status = charge.status
    succeeded = status == Charge.Status.SUCCEEDED
    failed = status == Charge.Status.FAILED
    detail = charge.status_detail
    shown = dict(CHARGE_FIELDS if refunds is not None else CHARGE_FIELDS_UNEMBEDDED)
    shown.update(
        id=charge.id,
        object="charge",
        amount=charge.amount,
        amount_captured=charge.amount if succeeded else 0,
        amount_refunded=charge.amount_refunded,
        billing_details={**NO_BILLING_DETAILS, "address": dict(NO_ADDRESS)},
        captured=succeeded,
        created=unix(charge.created_at),
        currency=charge.currency,
        customer=charge.customer or None,
        description=charge.description or None,
        disputed=bool(charge.dispute_id),
        # A failed charge's code from the provider (card_declined), when it gave one.
        failure_code=detail if failed and FAILURE_CODE.match(detail) else None,
        failure_message=(detail or None) if failed else None,
        fraud_details={},
        metadata=shown_metadata(charge.metadata),
        paid=succeeded,
        payment_intent=charge.payment_intent or None,
        receipt_email=charge.receipt_email or None,
        refunded=bool(charge.refunded),
        status=str(shown_status(status)),
        ledger_status=str(status),
    )
    if refunds is not None:
        shown["refunds"] = refunds
    return shown


def read_newest_refunds(charge: Charge, count: int) -> list[Refund]:
    """A charge's `count` newest refunds, newest first, read now."""
    return list(charge.refunds.order_by("-created_at", "-id")[:count])


def refund_list(charge: Charge, refunds: list[Refund], size: int) -> dict[str, Any]:
    """A charge's embedded refunds: the first `size` of `refunds` (newest first, one more
    than `size` when there are more), and whether there are others."""
    return {
        "object": "list",
        "data": [render_refund(refund) for refund in refunds[:size]],
        "has_more": len(refunds) > size,
        "url": f"/v1/charges/{charge.id}/refunds",
    }


# What render_charge starts from: ChargeSerializer's fields in order, the fixed ones set.
CHARGE_FIELDS = fixed_fields(ChargeSerializer)
CHARGE_FIELDS_UNEMBEDDED = {name: v for name, v in CHARGE_FIELDS.items() if name != "refunds"}


class ChargeListSerializer(StripeList):
    data = ChargeSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
