"""Charges and refunds as Stripe shapes them. Our `unknown` status is an extension."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ledger_app.models import Charge, Refund


def unix(moment) -> int:
    return int(moment.timestamp())


class RefundSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    amount = serializers.IntegerField(help_text="Minor units.")
    charge = serializers.CharField(source="charge_id")
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    metadata = serializers.DictField(child=serializers.CharField())
    reason = serializers.SerializerMethodField()
    status = serializers.ChoiceField(
        choices=Refund.Status.choices,
        help_text="pending, succeeded, failed, or unknown (the provider's answer is not "
        "known yet; the amount stays reserved until the reconciler learns it).",
    )
    failure_reason = serializers.SerializerMethodField()

    def get_object(self, refund) -> str:
        return "refund"

    def get_created(self, refund) -> int:
        return unix(refund.created_at)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reason(self, refund) -> str | None:
        return refund.reason or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_failure_reason(self, refund) -> str | None:
        return refund.status_detail or None if refund.status == Refund.Status.FAILED else None


class RefundListSerializer(serializers.Serializer):
    object = serializers.CharField(default="list")
    data = RefundSerializer(many=True)
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class ChargeSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.SerializerMethodField()
    amount = serializers.IntegerField(help_text="Minor units.")
    amount_captured = serializers.SerializerMethodField()
    amount_refunded = serializers.IntegerField()
    captured = serializers.SerializerMethodField()
    created = serializers.SerializerMethodField()
    currency = serializers.CharField()
    customer = serializers.SerializerMethodField()
    description = serializers.SerializerMethodField()
    metadata = serializers.DictField(child=serializers.CharField())
    paid = serializers.SerializerMethodField()
    refunded = serializers.BooleanField()
    status = serializers.ChoiceField(
        choices=Charge.Status.choices,
        help_text="pending, succeeded, failed, or unknown (capture outcome not known yet).",
    )
    failure_message = serializers.SerializerMethodField()
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

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_customer(self, charge) -> str | None:
        return charge.customer or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_description(self, charge) -> str | None:
        return charge.description or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_failure_message(self, charge) -> str | None:
        return charge.status_detail or None if charge.status == Charge.Status.FAILED else None

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


class ChargeListSerializer(serializers.Serializer):
    object = serializers.CharField(default="list")
    data = ChargeSerializer(many=True)
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class ErrorDetailSerializer(serializers.Serializer):
    type = serializers.CharField()
    code = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    param = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class RefundCreateSerializer(serializers.Serializer):
    """For the schema only; the view parses Stripe's bracket notation itself."""

    charge = serializers.CharField()
    amount = serializers.IntegerField(
        required=False, min_value=1, help_text="Minor units. Omitted: all that is left."
    )
    reason = serializers.ChoiceField(choices=Refund.Reason.choices, required=False)
    metadata = serializers.DictField(child=serializers.CharField(), required=False)


class ChargeCreateSerializer(serializers.Serializer):
    """For the schema only."""

    amount = serializers.IntegerField(min_value=1, help_text="Minor units.")
    currency = serializers.CharField(help_text="ISO 4217 code, e.g. usd.")
    description = serializers.CharField(required=False)
    metadata = serializers.DictField(child=serializers.CharField(), required=False)
    source = serializers.CharField(
        required=False, help_text="A payment source for the provider (kept in metadata.source)."
    )
