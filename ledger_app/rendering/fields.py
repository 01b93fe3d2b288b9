"""Fields and shapes every Stripe object here shares: ids that expand[] may replace, text
a model keeps blank that Stripe shows as null, fields with one value on every object, the
list object, the error envelope, and a status or metadata as Stripe shows them. Every field
and every value is one Stripe's own object can have (stripe/openapi's spec3.json;
tests/api/test_stripe_conformance.py checks): a field that means nothing here and that
Stripe shows as null is null, one Stripe leaves out when it has no value is left out.
Statuses Stripe does not have (a refund waiting for approval, an outcome not known yet)
show as Stripe's `pending`; our own status is beside it, in the one field of our own,
`ledger_status`. What the API accepts is in api/params.py."""

from __future__ import annotations

import copy
from typing import Any

from rest_framework import serializers

from ledger_app.charges.models import MovementStatus


def unix(moment) -> int:
    return int(moment.timestamp())


class BlankAsNull(serializers.CharField):
    """Text a model keeps blank when there is none, which Stripe shows as null."""

    def __init__(self, **kwargs) -> None:
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value: str) -> str | None:  # type: ignore[override]  # null where the model keeps blank
        return value or None


class ExpandableId(BlankAsNull):
    """An id that expand[] may replace by its object (api/expansion.py): in the schema,
    the id or that object (`component`, the OpenAPI component's name)."""

    def __init__(self, component: str, **kwargs) -> None:
        self.component = component
        super().__init__(**kwargs)


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


def fixed_fields(serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
    """The serializer's fields in their declared order, each holding its Fixed value (the
    same on every object) or None: a render function copies this and sets the object's
    own values in place, so its answer keeps the order. A Fixed container (a list, a
    dict) is None here too, so no two answers share one: the render sets a new one."""
    return {
        name: None
        if not isinstance(field, Fixed) or isinstance(field.value, (dict, list))
        else field.value
        for name, field in serializer_class().fields.items()
    }


# Our statuses that Stripe's clients see as `pending`: money reserved, not final.
SHOWN_AS_PENDING = frozenset(
    {MovementStatus.PENDING, MovementStatus.UNKNOWN, MovementStatus.AWAITING_APPROVAL}
)


def shown_status(status: str) -> str:
    """A charge's or refund's status in Stripe's terms."""
    return MovementStatus.PENDING if status in SHOWN_AS_PENDING else status


# A charge's and a refund's declared fields are their OpenAPI schema (api/schema.py);
# render_charge and render_refund draw them, field by field in that order, without DRF's
# per-field machinery (an event's snapshot draws one or two objects inside a charge's lock,
# and DRF's fields were most of a refund's Python). tests/api/test_rendering.py holds the
# two to the same fields.
class StripeObject(serializers.Serializer):
    """An object whose `LEFT_OUT_WHEN_NULL` fields are absent when they have no value, as
    Stripe leaves them out (the spec has them optional and not nullable)."""

    LEFT_OUT_WHEN_NULL: tuple[str, ...] = ()


LEDGER_STATUS_HELP = (
    "Our own status, beside Stripe's: awaiting_approval (over the requester's limit, "
    "waiting for a person), pending (not sent yet, or sent and not answered), unknown (the "
    "provider's answer is not known yet: the reconciler asks), succeeded, failed, canceled. "
    "Stripe's `status` shows the first three as pending."
)

NULL_OBJECT = {"type": "object", "nullable": True}
NULL_INTEGER = {"type": "integer", "nullable": True}
FALSE = {"type": "boolean"}


def shown_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as the API shows it: a new dict of strings (as DRF's DictField would)."""
    return {str(key): None if value is None else str(value) for key, value in metadata.items()}


# Stripe's list object: a page of `data`, newest first. (A comment, not a docstring:
# drf-spectacular would show it as the description of every list.)
class StripeList(serializers.Serializer):
    object = serializers.CharField(default="list")
    has_more = serializers.BooleanField()
    url = serializers.CharField()


class ErrorDetailSerializer(serializers.Serializer):
    type = serializers.CharField()
    code = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    param = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()
