"""Objects as Stripe shapes them: in API answers, in events' `data.object`, and so in
webhooks. Our `unknown` status is an extension. What the API accepts is in api/params.py."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ledger_app.models import Charge, Refund


def unix(moment) -> int:
    return int(moment.timestamp())


class BlankAsNull(serializers.CharField):
    """Text a model keeps blank when there is none, which Stripe shows as null."""

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: str) -> str | None:
        return value or None


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
    charge = serializers.CharField(source="charge_id")
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    metadata = serializers.DictField(child=serializers.CharField())
    reason = BlankAsNull()
    status = serializers.ChoiceField(
        choices=Refund.Status.choices,
        help_text="pending, succeeded, failed, or unknown (the provider's answer is not "
        "known yet; the amount stays reserved until the reconciler learns it).",
    )
    failure_reason = FailureDetail()

    def get_object(self, refund) -> str:
        return "refund"

    def get_created(self, refund) -> int:
        return unix(refund.created_at)


# Stripe's list object: a page of `data`, newest first. (A comment, not a docstring:
# drf-spectacular would show it as the description of every list.)
class StripeList(serializers.Serializer):
    object = serializers.CharField(default="list")
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class RefundListSerializer(StripeList):
    data = RefundSerializer(many=True)


class ChargeSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_captured = serializers.SerializerMethodField()
    amount_refunded = serializers.IntegerField()
    captured = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    customer = BlankAsNull()
    description = BlankAsNull()
    metadata = serializers.DictField(child=serializers.CharField())
    paid = serializers.SerializerMethodField()
    refunded = serializers.BooleanField()
    status = serializers.ChoiceField(
        choices=Charge.Status.choices,
        help_text="pending, succeeded, failed, or unknown (capture outcome not known yet).",
    )
    failure_message = FailureDetail()
    refunds = serializers.SerializerMethodField(
        help_text="Only with expand[]=refunds: the charge's refunds, newest first."
    )

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

    @extend_schema_field(RefundListSerializer(allow_null=True))
    def get_refunds(self, charge) -> dict | None:
        if "refunds" not in self.context.get("expand", ()):
            return None
        refunds = list(charge.refunds.order_by("-created_at", "-id")[:101])
        return {
            "object": "list",
            "data": RefundSerializer(refunds[:100], many=True).data,
            "has_more": len(refunds) > 100,
            "url": f"/v1/charges/{charge.id}/refunds",
        }

    def to_representation(self, charge):
        data = super().to_representation(charge)
        if data["refunds"] is None:
            del data["refunds"]
        return data


class ChargeListSerializer(StripeList):
    data = ChargeSerializer(many=True)


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
    data = serializers.SerializerMethodField()
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
    data = EventSerializer(many=True)
