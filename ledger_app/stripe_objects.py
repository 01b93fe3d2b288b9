"""Objects as Stripe shapes them: in API answers, in events' `data.object`, and so in
webhooks. Every field of Stripe's own object is there, so code written against Stripe
reads them unchanged; a field that means nothing here (no payment intents, transfers,
receipts or disputes) is always null, false or empty. Our `unknown` status is an
extension. What the API accepts is in api/params.py."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ledger_app.models import Charge, Event, Refund

# How many of a charge's refunds it shows, newest first: has_more and url page on.
EMBEDDED_REFUNDS = 10
EXPANDED_REFUNDS = 100  # with expand[]=refunds
# A failed charge's status_detail that is a provider's code (card_declined), not prose.
FAILURE_CODE = re.compile(r"^[a-z][a-z0-9_]{0,99}\Z")


def unix(moment) -> int:
    return int(moment.timestamp())


class BlankAsNull(serializers.CharField):
    """Text a model keeps blank when there is none, which Stripe shows as null."""

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: str) -> str | None:  # type: ignore[override]  # null where the model keeps blank
        return value or None


class Fixed(serializers.Field):
    """A field with the same value on every object here, such as `livemode: false` or a
    `payment_intent` that is always null. `schema` is its OpenAPI schema (api/schema.py
    hands it to the generator): by default a nullable string, for null ids."""

    def __init__(self, value: Any = None, schema: dict | None = None, **kwargs) -> None:
        self.value = value
        self.schema = schema or {"type": "string", "nullable": True}
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, obj) -> Any:
        return copy.deepcopy(self.value)


NULL_OBJECT = {"type": "object", "nullable": True}
NULL_INTEGER = {"type": "integer", "nullable": True}
FALSE = {"type": "boolean"}
NO_ADDRESS = dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state"))
NO_BILLING_DETAILS = {
    "address": NO_ADDRESS,
    "email": None,
    "name": None,
    "phone": None,
    "tax_id": None,
}


@extend_schema_field(serializers.CharField(allow_null=True))
class FailureDetail(serializers.Field):
    """Why the provider said no: a charge's failure_message, a refund's failure_reason."""

    def __init__(self, **kwargs) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, movement) -> str | None:
        if movement.status != movement.Status.FAILED:
            return None
        return movement.status_detail or None


class RefundSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    amount = serializers.IntegerField(help_text="Minor units.")
    balance_transaction = Fixed()
    charge = serializers.CharField(source="charge_id")
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    customer = Fixed()
    customer_account = Fixed()
    destination_details = Fixed(schema=NULL_OBJECT)
    failure_reason = FailureDetail()
    metadata = serializers.DictField(child=serializers.CharField())
    payment_intent = Fixed()
    payment_method = Fixed()
    reason = BlankAsNull()
    receipt_number = Fixed()
    source_transfer_reversal = Fixed()
    status = serializers.SerializerMethodField(
        help_text="pending, succeeded, failed, canceled, or unknown (the provider's answer is "
        "not known yet; the amount stays reserved until the reconciler learns it). A refund "
        "over the requester's limit is pending, with pending_reason awaiting_approval, until "
        "another person approves it (then it is sent) or rejects it (canceled)."
    )
    pending_reason = serializers.SerializerMethodField(
        help_text="awaiting_approval while over the requester's limit; processing while the "
        "provider has not answered; null otherwise."
    )
    transfer_reversal = Fixed()

    def get_object(self, refund) -> str:
        return "refund"

    def get_status(self, refund) -> str:
        # Stripe's clients know pending: money reserved, not final. Ours waits for a person.
        if refund.status == Refund.Status.AWAITING_APPROVAL:
            return Refund.Status.PENDING
        return refund.status

    def get_pending_reason(self, refund) -> str | None:
        return {
            Refund.Status.AWAITING_APPROVAL: "awaiting_approval",
            Refund.Status.PENDING: "processing",
        }.get(refund.status)

    def get_created(self, refund) -> int:
        return unix(refund.created_at)


# Stripe's list object: a page of `data`, newest first. (A comment, not a docstring:
# drf-spectacular would show it as the description of every list.)
class StripeList(serializers.Serializer):
    object = serializers.CharField(default="list")
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class RefundListSerializer(StripeList):
    data = RefundSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class ChargeSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_captured = serializers.SerializerMethodField()
    amount_refunded = serializers.IntegerField()
    application = Fixed()
    application_fee = Fixed()
    application_fee_amount = Fixed(schema=NULL_INTEGER)
    balance_transaction = Fixed()
    billing_details = Fixed(NO_BILLING_DETAILS, {"type": "object"})
    calculated_statement_descriptor = Fixed()
    captured = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    customer = BlankAsNull()
    description = BlankAsNull()
    disputed = Fixed(False, FALSE)
    failure_balance_transaction = Fixed()
    failure_code = serializers.SerializerMethodField()
    failure_message = FailureDetail()
    fraud_details = Fixed({}, {"type": "object"})
    livemode = Fixed(False, FALSE)
    metadata = serializers.DictField(child=serializers.CharField())
    on_behalf_of = Fixed()
    outcome = Fixed(schema=NULL_OBJECT)
    paid = serializers.SerializerMethodField()
    payment_intent = Fixed()
    payment_method = Fixed()
    payment_method_details = Fixed(schema=NULL_OBJECT)
    receipt_email = Fixed()
    receipt_number = Fixed()
    receipt_url = Fixed()
    refunded = serializers.BooleanField()
    refunds = serializers.SerializerMethodField(
        help_text=f"The charge's {EMBEDDED_REFUNDS} newest refunds ({EXPANDED_REFUNDS} with "
        "expand[]=refunds); has_more says whether there are others, and url lists them all."
    )
    review = Fixed()
    shipping = Fixed(schema=NULL_OBJECT)
    source = Fixed(schema=NULL_OBJECT)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
    source_transfer = Fixed()
    statement_descriptor = Fixed()
    statement_descriptor_suffix = Fixed()
    status = serializers.ChoiceField(
        choices=Charge.Status.choices,
        help_text="pending, succeeded, failed, or unknown (capture outcome not known yet).",
    )
    transfer_data = Fixed(schema=NULL_OBJECT)
    transfer_group = Fixed()

    def get_object(self, charge) -> str:
        return "charge"

    def get_amount_captured(self, charge) -> int:
        return charge.amount if charge.status == Charge.Status.SUCCEEDED else 0

    def get_captured(self, charge) -> bool:
        return charge.status == Charge.Status.SUCCEEDED

    def get_paid(self, charge) -> bool:
        return charge.status == Charge.Status.SUCCEEDED

    def get_created(self, charge) -> int:
        return unix(charge.created_at)

    def get_failure_code(self, charge) -> str | None:
        """A failed charge's code from the provider (card_declined), when it gave one."""
        if charge.status != Charge.Status.FAILED:
            return None
        return charge.status_detail if FAILURE_CODE.match(charge.status_detail) else None

    @extend_schema_field(RefundListSerializer)
    def get_refunds(self, charge) -> dict:
        expanded = "refunds" in self.context.get("expand", ())
        size = EXPANDED_REFUNDS if expanded else EMBEDDED_REFUNDS
        # A list's charges come with theirs (selectors.with_first_refunds)
        refunds = None if expanded else getattr(charge, "first_refunds", None)
        if refunds is None:
            refunds = list(charge.refunds.order_by("-created_at", "-id")[: size + 1])
        return refund_list(charge, refunds, size)


class _ChargeWithRefundsGiven(ChargeSerializer):
    """A charge whose newest refunds the caller passes in (plain(newest_refunds=...)): its
    refunds are not read here, and `plain` puts the given ones in their place."""

    def get_refunds(self, charge) -> dict:
        return {}


def refund_list(charge: Charge, refunds: list[Refund], size: int) -> dict[str, Any]:
    """A charge's embedded refunds: the first `size` of `refunds` (newest first, one more
    than `size` when there are more), and whether there are others."""
    return {
        "object": "list",
        "data": [plain(refund) for refund in refunds[:size]],
        "has_more": len(refunds) > size,
        "url": f"/v1/charges/{charge.id}/refunds",
    }


class ChargeListSerializer(StripeList):
    data = ChargeSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class ErrorDetailSerializer(serializers.Serializer):
    type = serializers.CharField()
    code = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    param = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class EventSerializer(serializers.Serializer):
    """Stripe's event: what changed (`type`), the object right after the change
    (`data.object`) and, for an update, the moved fields as they were before
    (`data.previous_attributes`), and the API request that caused it, if one did."""

    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    api_version = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    data = serializers.SerializerMethodField()  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
    livemode = serializers.SerializerMethodField()
    pending_webhooks = serializers.SerializerMethodField()
    request = serializers.SerializerMethodField()
    type = serializers.CharField()

    def get_object(self, event) -> str:
        return "event"

    def get_api_version(self, event) -> str | None:
        return None

    def get_created(self, event) -> int:
        return unix(event.created_at)

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "object": {"type": "object"},
                "previous_attributes": {"type": "object"},
            },
        }
    )
    def get_data(self, event) -> dict:
        data = {"object": event.data_object}
        if event.previous_attributes is not None:
            data["previous_attributes"] = event.previous_attributes
        return data

    def get_livemode(self, event) -> bool:
        return False

    def get_pending_webhooks(self, event) -> int:
        counted = getattr(event, "pending_webhooks", None)  # selectors.events_listed
        if counted is not None:
            return counted
        return event.deliveries.filter(status="pending").count()

    @extend_schema_field(
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "nullable": True},
                "idempotency_key": {"type": "string", "nullable": True},
            },
        }
    )
    def get_request(self, event) -> dict:
        return {
            "id": event.request_id or None,
            "idempotency_key": event.request_idempotency_key or None,
        }


class EventListSerializer(StripeList):
    data = EventSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


@functools.cache
def _shared(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """One bound serializer per class, kept: DRF deep-copies every declared field each
    time a serializer is made, which was most of the CPU of rendering one object.
    Rendering reads the fields and never changes them, so threads can share it."""
    return serializer_class(context={"expand": ()})


def plain(obj: Charge | Refund, *, newest_refunds: list[Refund] | None = None) -> dict[str, Any]:
    """The object as GET /v1/charges/{id} or /v1/refunds/{id} shows it with no expand[]:
    what an event's `data.object` holds and what a charge embeds of its refunds. For a
    charge, `newest_refunds` (newest first, EMBEDDED_REFUNDS + 1 at most) are the refunds
    it embeds, when the caller has them; without them they are read."""
    if not isinstance(obj, Charge):
        return _shared(RefundSerializer).to_representation(obj)
    if newest_refunds is None:
        return _shared(ChargeSerializer).to_representation(obj)
    data = _shared(_ChargeWithRefundsGiven).to_representation(obj)
    data["refunds"] = refund_list(obj, newest_refunds, EMBEDDED_REFUNDS)
    return data


def event_body(event: Event) -> str:
    """An event as a webhook delivery sends it (pending_webhooks as it is now)."""
    return json.dumps(EventSerializer(event).data)
