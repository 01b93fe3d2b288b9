"""What each endpoint accepts: one serializer per endpoint, which checks the parameters
(after parsing.fold) and describes them in the OpenAPI schema.

A serializer checks that each parameter is there and has the right type (fields.py).
Whether a value is acceptable (an amount's range, a reason, a currency, metadata sizes)
is the services' rule, checked for every caller.

Stripe answers a bad request with one error: the first problem found, in this order:
1. a parameter the endpoint does not know (parameter_unknown);
2. the serializer's `check_together`, for rules across parameters;
3. each field in the order declared, with its `validate_<name>` if there is one.
The order is part of what clients see (a request with two problems is told of the
first), so fields are declared in the order they are to be checked, not by importance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.http import QueryDict
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.fields import empty

from ledger_app.api import parsing
from ledger_app.api.errors import ApiError
from ledger_app.api.expansion import CHARGE_FIELDS, INTENT_FIELDS, REFUND_FIELDS, in_list
from ledger_app.api.fields import (
    Amount,
    Choice,
    Created,
    Cursor,
    Expand,
    Integer,
    Metadata,
    ObjectId,
    OnlyValue,
    Reference,
    Strings,
    Text,
    refuse,
)
from ledger_app.errors import InvalidCurrency
from ledger_app.money import normalize_currency
from ledger_app.refunds.models import Refund
from ledger_app.rendering.books import BALANCE_TRANSACTION_TYPES, PAYOUT_STATUSES

T = TypeVar("T", bound=Callable[..., Any])  # the serializer class create_body decorates


def create_body(name: str, description: str) -> Callable[[T], T]:
    """A POST's body in the schema. It takes expand[] as Stripe clients may send it,
    but nothing a POST answers expands, so the schema leaves it out."""
    return extend_schema_serializer(
        component_name=name, description=description, exclude_fields=["expand"]
    )


class Params(serializers.Serializer):
    """An endpoint that takes no parameters; the base of those that do."""

    def to_internal_value(self, data: Mapping[str, Any]) -> dict[str, Any]:
        for name in data:
            if name not in self.fields:
                raise serializers.ValidationError(
                    {name: f"Received unknown parameter: {name}"}, code="parameter_unknown"
                )
        self.check_together(data)
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(bracketed(exc.detail)) from None

    def check_together(self, data: Mapping[str, Any]) -> None:
        """Rules across parameters, before any one is checked: raise an ApiError (it
        names no parameter, or the one it names). None by default."""


class ListParams(Params):
    """A page of a list, newest first; expand[] takes nothing by default (ListOf gives
    the `data.<field>` its objects expand)."""

    expand = Expand()

    limit = Integer(required=False, min_value=1, max_value=100, help_text="1 to 100, default 10.")
    starting_after = Cursor(required=False, help_text="An id: the page after it.")
    ending_before = Cursor(required=False, help_text="An id: the page before it.")

    def check_together(self, data: Mapping[str, Any]) -> None:
        if data.get("starting_after") and data.get("ending_before"):
            raise ApiError(
                "Send starting_after or ending_before, not both.", code="parameters_exclusive"
            )


class ChargeFilter(Params):
    charge = ObjectId(required=False, help_text="Only this charge's.")


class PaymentIntentFilter(Params):
    payment_intent = ObjectId(required=False, help_text="Only this PaymentIntent's.")


class CreatedFilter(Params):
    created = Created(
        required=False,
        help_text="Unix seconds: created=T (that second), or created[gt], created[gte], "
        "created[lt], created[lte].",
    )


class TypeFilter(Params):
    type = Text(
        required=False,
        help_text="Only events of this type; `charge.*` takes every charge event.",
    )
    types = Strings(
        required=False, max_length=20, help_text="Only events of these types (up to 20)."
    )

    def check_together(self, data: Mapping[str, Any]) -> None:
        if "type" in data and "types" in data:
            raise ApiError(
                "You may pass either type or types, but not both.", code="parameters_exclusive"
            )
        super().check_together(data)


class Listed(Choice):
    """A filter's value, one of Stripe's `choices`; any other is refused here (a filter
    has no service behind it to refuse it)."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if value not in self.choices:
            refuse(
                "parameter_invalid",
                f"Invalid {self.field_name}: must be one of {', '.join(self.choices)}.",
            )
        return value


class Currency(Text):
    """A currency to filter by: an ISO 4217 code, in any case (lower-cased, as stored)."""

    def to_internal_value(self, data: Any) -> str:
        try:
            return normalize_currency(super().to_internal_value(data))
        except InvalidCurrency:
            refuse("parameter_invalid", "Invalid currency: send an ISO 4217 code, such as usd.")


class RefundPage(ListParams):
    expand = Expand(allowed=in_list(REFUND_FIELDS))


class ChargeListParams(PaymentIntentFilter, CreatedFilter, ListParams):
    """The customer, PaymentIntent and created filters, then the page (DRF takes the
    first base's fields first)."""

    customer = Reference(required=False, help_text="Only this customer's (the charge's customer).")
    expand = Expand(allowed=in_list(CHARGE_FIELDS))


class RefundListParams(ChargeFilter, PaymentIntentFilter, CreatedFilter, RefundPage):
    """The charge, PaymentIntent and created filters, then the page."""


class EventListParams(TypeFilter, CreatedFilter, ListParams):
    """The type and created filters, then the page."""


class BalanceTransactionListParams(CreatedFilter, ListParams):
    """The created filter, then the page, then the payout, type, source and currency
    filters."""

    payout = ObjectId(required=False, help_text="Only those paid out in this payout (po_...).")
    type = Listed(
        choices=BALANCE_TRANSACTION_TYPES, required=False, help_text="Only those of this type."
    )
    source = ObjectId(  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
        required=False,
        help_text="Only those this object moved: the provider's id of a charge, refund, "
        "dispute or payout.",
    )
    currency = Currency(required=False, help_text="Only those in this currency.")


class PayoutListParams(CreatedFilter, ListParams):
    """The created filter, then the page, then the arrival_date and status filters."""

    arrival_date = Created(
        required=False,
        help_text="Unix seconds of its arrival day: arrival_date=T, or arrival_date[gt], "
        "[gte], [lt], [lte].",
    )
    status = Listed(choices=PAYOUT_STATUSES, required=False, help_text="Only those in it.")


class ChargeRetrieveParams(Params):
    expand = Expand(allowed=CHARGE_FIELDS)


class RefundRetrieveParams(Params):
    expand = Expand(allowed=REFUND_FIELDS)


class PaymentIntentRetrieveParams(Params):
    expand = Expand(allowed=INTENT_FIELDS)


class RetrieveParams(Params):
    """A GET of an object with nothing to expand: expand[] is refused for any field."""

    expand = Expand()


@create_body(
    "RefundCreate",
    "Refund a succeeded charge, named by `charge` or by its `payment_intent`: `amount`, or "
    "all that is left.",
)
class RefundCreateParams(Params):
    expand = Expand(allowed=REFUND_FIELDS)
    # Only an absent amount means "all that is left"; an explicit JSON null is refused,
    # so a client that writes a missing value as null never refunds everything.
    amount = Amount(required=False, help_text="Minor units. Omitted: all that is left.")
    charge = Text(required=False, help_text="The charge to refund (or payment_intent).")
    payment_intent = Text(
        required=False,
        help_text="The PaymentIntent whose succeeded charge to refund (or charge; both: the "
        "charge must be the PaymentIntent's).",
    )
    reason = Choice(choices=Refund.Reason.choices, required=False, null_as_absent=True)
    metadata = Metadata(required=False, null_as_absent=True)
    instructions_email = Text(
        required=False,
        null_as_absent=True,
        help_text="Where the customer's mails about this refund go (else the charge's "
        "receipt_email).",
    )

    def check_together(self, data: Mapping[str, Any]) -> None:
        if data.get("charge") is None and data.get("payment_intent") is None:
            raise ApiError(
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                code="parameter_missing",
                param="charge",
            )


@create_body("ChargeRefundCreate", "Refund the charge in the path (Stripe's older endpoint).")
class ChargeRefundCreateParams(Params):
    expand = Expand(allowed=REFUND_FIELDS)
    amount = Amount(required=False, help_text="Minor units. Omitted: all that is left.")
    reason = Choice(choices=Refund.Reason.choices, required=False, null_as_absent=True)
    metadata = Metadata(required=False, null_as_absent=True)
    instructions_email = Text(
        required=False,
        null_as_absent=True,
        help_text="Where the customer's mails about this refund go (else the charge's "
        "receipt_email).",
    )


@create_body("RefundCancel", "Cancel a refund awaiting approval.")
class RefundCancelParams(Params):
    expand = Expand(allowed=REFUND_FIELDS)


@create_body(
    "RefundUpdate",
    "Change a refund's metadata, the one field that changes: keys are merged into what is "
    "there, a key sent with an empty value is removed.",
)
class RefundUpdateParams(Params):
    expand = Expand(allowed=REFUND_FIELDS)
    metadata = Metadata(required=False, null_as_absent=True)


class PaymentSource(Text):
    """`source` travels to the provider as metadata.source, so it may not be in metadata
    too. That comes before its type: `"source": null` next to a metadata.source is told
    what is wrong, the source sent twice."""

    def run_validation(self, data: Any = empty) -> Any:
        metadata = self.parent.initial_data.get("metadata")
        if data is not empty and isinstance(metadata, dict) and "source" in metadata:
            refuse("parameters_exclusive", "Send the source once: as source, not also in metadata.")
        return super().run_validation(data)


@create_body("ChargeCreate", "Charge `amount` minor units of `currency` through the provider.")
class ChargeCreateParams(Params):
    expand = Expand(allowed=CHARGE_FIELDS)
    metadata = Metadata(required=False, null_as_absent=True)
    source = PaymentSource(  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
        required=False, help_text="A payment source for the provider (kept in metadata.source)."
    )
    amount = Amount(help_text="Minor units.")
    currency = Text(help_text="ISO 4217 code, e.g. usd.")
    description = Text(required=False)
    receipt_email = Text(
        required=False, null_as_absent=True, help_text="Where the customer's refund mails go."
    )
    capture = OnlyValue(
        True,
        why="every charge is captured when it is made",
        required=False,
        help_text="true (the default): capture now. false is refused.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The service's arguments: the payment source goes in metadata."""
        metadata = attrs.get("metadata") or {}
        if "source" in attrs:
            metadata = {**metadata, "source": attrs.pop("source")}
        attrs["metadata"] = metadata
        attrs.pop("capture", None)  # true: what create_charge does
        return attrs


def bracketed(detail: Any) -> Any:
    """A refusal nested by a field (`{"created": {"gt": [...]}}`) under the parameter's
    name as a form sends it (`{"created[gt]": [...]}`), so each names one parameter."""
    if not isinstance(detail, dict):
        return detail
    flat = {}
    for name, problems in detail.items():
        if isinstance(problems, dict):
            for inner, inner_problems in bracketed(problems).items():
                flat[f"{name}[{inner}]"] = inner_problems
        else:
            flat[name] = problems
    return flat


def fold(params_class: type[Params], data: QueryDict | Mapping) -> parsing.Folded:
    """parsing.fold, after the brackets of the endpoint's own filters, which parsing.fold
    does not know: `created[gt]=T` into {"created": {"gt": "T"}}, `types[]=a` (or
    `types[0]=a`) into {"types": ["a"]}. Other brackets are left to parsing.fold."""
    shapes = {
        name: field.folds_as  # type: ignore[attr-defined]  # our fields' own attribute
        for name, field in params_class._declared_fields.items()
        if getattr(field, "folds_as", None) is not None
    }
    if isinstance(data, QueryDict):
        _refuse_unknown_hashes(params_class, data)
    if not shapes or not isinstance(data, QueryDict):
        return parsing.fold(data)
    rest = data.copy()
    filters: dict[str, Any] = {}
    for raw_key in list(rest):
        match = parsing.BRACKETED.match(raw_key)
        if match is None or match[1] not in shapes:
            continue
        name, inner = match.groups()
        values = rest.pop(raw_key)
        _fold_filter(filters, raw_key, shape=shapes[name], name=name, inner=inner, values=values)
    folded = parsing.fold(rest)
    for name, value in filters.items():
        if name in folded:
            raise ApiError(f"{name} was sent more than once.", code="parameter_invalid", param=name)
        folded[name] = value
    return folded


def _refuse_unknown_hashes(params_class: type[Params], data: QueryDict) -> None:
    """`shipping[name]=...` on an endpoint with no `shipping` is an unknown parameter, as
    `shipping=...` would be (not a malformed name of a known one)."""
    for raw_key in data:
        match = parsing.BRACKETED.match(raw_key)
        if match is not None and match[1] not in params_class._declared_fields:
            raise ApiError(
                f"Received unknown parameter: {match[1]}", code="parameter_unknown", param=match[1]
            )


def _fold_filter(
    filters: dict, raw_key: str, *, shape: type, name: str, inner: str, values: list[str]
) -> None:
    if shape is list and (inner == "" or inner.isdigit()):
        filters.setdefault(name, []).extend(values)
        return
    if shape is not dict or inner == "":
        raise ApiError(
            f"Invalid parameter name: {raw_key}", code="parameter_invalid", param=raw_key
        )
    if len(values) != 1:
        raise ApiError(
            f"{raw_key} was sent more than once.", code="parameter_invalid", param=raw_key
        )
    filters.setdefault(name, {})[inner] = values[0]
