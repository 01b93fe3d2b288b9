"""The fields request parameters are checked with: DRF fields made strict.

DRF's own fields coerce (its CharField takes 5 as "5", its IntegerField takes "5" and 5.0
as 5) and answer in DRF's words. These take a value only if it already has the right
type, and refuse with Stripe's codes and messages; errors.py puts the first refusal in
Stripe's envelope, with the field's name as `param`.

They check presence and type. Which values are valid (an amount's range, a reason,
a currency, metadata sizes) is the ledger's rule, checked by the services for every
caller; a field may still show it in the schema (Amount's minimum, Choice's choices).
"""

from __future__ import annotations

import re
from typing import Any, NoReturn, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField, empty

from ledger_app.mixin_bases import DrfFieldMixin
from ledger_app.text import has_unstorable_characters

# \Z: "$" would let "5\n" through, and int() takes it
DIGITS = re.compile(r"^-?[0-9]{1,30}\Z")
MAX_ID_LENGTH = 64


def refuse(code: str, message: str) -> NoReturn:
    raise serializers.ValidationError(message, code=code)


def could_be_an_id(value: str) -> bool:
    """Whether any object could have this id; one that none could is simply missing."""
    return 0 < len(value) <= MAX_ID_LENGTH and not has_unstorable_characters(value)


class Strict(DrfFieldMixin):
    """What the fields below share.

    A required parameter that is absent or null is parameter_missing. An optional one
    that is absent is left out of the validated data; null is a value of the wrong type,
    unless `null_as_absent` (then it is the same as not sending it). DRF's validators do
    not run: each field checks its values itself.
    """

    def __init__(self, *, null_as_absent: bool = False, **kwargs: Any) -> None:
        self.null_as_absent = null_as_absent
        super().__init__(**kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        if data is None and self.null_as_absent:
            data = empty
        if data is empty or (data is None and self.required):
            if self.required:
                refuse("parameter_missing", f"Missing required param: {self.field_name}.")
            raise SkipField()
        return self.to_internal_value(data)


class Integer(Strict, serializers.IntegerField):
    """A whole number: in a JSON body a JSON integer; in a form or a query a string of
    ASCII digits ("500" is 500; "5.5", "1e3", " 5", "+5" and "" are not). Floats and
    bools are never integers. `min_value` and `max_value`, if given, are checked here."""

    def to_internal_value(self, data: Any) -> int:
        return whole_number(
            data,
            from_json=bool(self.context.get("from_json")),
            name=cast(str, self.field_name),  # bound to its parameter by now
            low=self.min_value,
            high=self.max_value,
        )


def whole_number(
    data: Any, *, from_json: bool, name: str, low: int | None = None, high: int | None = None
) -> int:
    """`data` as an Integer takes it, checked against `low` and `high` if given."""
    if type(data) is int:
        value = data
    elif not from_json and isinstance(data, str) and DIGITS.match(data):
        value = int(data)
    else:
        refuse("parameter_invalid_integer", f"Invalid integer: {str(data)[:50]}")
    if (low is not None and value < low) or (high is not None and value > high):
        refuse("parameter_invalid_integer", f"{name} must be between {low} and {high}.")
    return value


@extend_schema_field({"type": "integer", "minimum": 1})
class Amount(Integer):
    """Minor units. Its range (1 to 2**63 - 1) is the ledger's rule: the service checks
    it, after every parameter has been found to have the right type."""


class _String(Strict):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            refuse(
                "parameter_invalid",
                f"Invalid string: {self.field_name} must be a string.",
            )
        return data


class Text(_String, serializers.CharField):
    """A string, exactly as sent: not trimmed, and blank allowed (the service decides)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)


class Choice(_String, serializers.ChoiceField):
    """A string; the schema lists `choices`, the service refuses any other value."""


class ObjectId(Text):
    """An id to look up, as in ?charge=ch_...; one no object could have is missing."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not could_be_an_id(value):
            refuse("resource_missing", f"No such object: '{value[:MAX_ID_LENGTH]}'")
        return value


class Reference(Text):
    """A reference of the caller's own to filter by, such as a charge's `customer`: any
    text a charge can hold (at most 255 characters, no NUL or lone surrogates)."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if len(value) > 255 or has_unstorable_characters(value):
            refuse("parameter_invalid", f"Invalid {self.field_name}: no charge holds it.")
        return value


class Cursor(ObjectId):
    """starting_after or ending_before: sent blank, it is the same as not sent."""

    def run_validation(self, data: Any = empty) -> Any:
        if data == "":
            raise SkipField()
        return super().run_validation(data)


class Flag(Strict, serializers.BooleanField):
    """A boolean: true or false in JSON; the strings "true" or "false" in a form."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if not self.context.get("from_json") and data in ("true", "false"):
            return data == "true"
        refuse("parameter_invalid", f"Invalid boolean: {str(data)[:50]}")


class OnlyValue(Flag):
    """One of Stripe's flags for which the back office does one thing: `value` is taken
    (it is what happens anyway), the other is refused saying `why`."""

    def __init__(self, value: bool, *, why: str, **kwargs: Any) -> None:
        self.value, self.why = value, why
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> bool:
        flag = super().to_internal_value(data)
        if flag is not self.value:
            shown = "true" if flag else "false"
            refuse("parameter_invalid", f"{self.field_name}={shown} is not supported: {self.why}.")
        return flag


class Metadata(Strict, serializers.DictField):
    """metadata[key]=value pairs. Only the shape is checked here: the service checks the
    number of keys, their sizes and what they hold."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(), **kwargs)

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            refuse("parameter_invalid", "Invalid metadata: send metadata[key]=value pairs.")
        return data


class Strings(Strict, serializers.ListField):
    """A list of strings, `types[]=a&types[]=b`; at most `max_length` of them if given.
    `folds_as`: the endpoint folds its brackets itself (params.fold)."""

    folds_as: type | None = list

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(), **kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            refuse("parameter_invalid", f"{self.field_name} must be a list of strings.")
        if self.max_length is not None and len(data) > self.max_length:
            refuse("parameter_invalid", f"Send at most {self.max_length} {self.field_name}.")
        return data


class Expand(Strings):
    """expand[]=...: which properties of the answer to expand, among `allowed`."""

    folds_as = None  # parsing.fold folds expand[] for every endpoint

    def __init__(self, *, allowed: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        self.allowed = allowed
        super().__init__(required=False, **kwargs)

    def to_internal_value(self, data: Any) -> set[str]:  # type: ignore[override]  # a set, unlike Strings
        data = super().to_internal_value(data)
        for item in data:
            if item not in self.allowed:
                refuse("parameter_invalid", f"This property cannot be expanded ({item}).")
        return set(data)


# The latest moment a datetime can hold (9999-12-31 23:59:59 UTC), in unix seconds.
MAX_UNIX_SECONDS = 253_402_300_799
CREATED_OPERATORS = ("gt", "gte", "lt", "lte")


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            op: {"type": "integer", "minimum": 0, "maximum": MAX_UNIX_SECONDS}
            for op in CREATED_OPERATORS
        },
        "additionalProperties": False,
    }
)
class Created(Strict, serializers.Field):
    """Stripe's `created` filter, in unix seconds: `created=T` (within that second) or
    any of `created[gt]`, `[gte]`, `[lt]`, `[lte]`. The value is a dict of operator to
    seconds, with "eq" for the plain form. A bad bound is refused as `created[gt]`."""

    folds_as: type | None = dict

    def to_internal_value(self, data: Any) -> dict[str, int]:
        if not isinstance(data, dict):
            return {"eq": self.seconds(data)}
        bounds = {}
        for operator, value in data.items():
            try:
                if operator not in CREATED_OPERATORS:
                    refuse(
                        "parameter_unknown",
                        f"Received unknown parameter: {self.field_name}[{operator}]",
                    )
                bounds[operator] = self.seconds(value, operator)
            except serializers.ValidationError as exc:
                # Params names the parameter from the nesting: created[gt]
                raise serializers.ValidationError({operator: exc.detail}) from None
        return bounds

    def seconds(self, value: Any, operator: str = "") -> int:
        name = f"{self.field_name}[{operator}]" if operator else cast(str, self.field_name)
        return whole_number(
            value,
            from_json=bool(self.context.get("from_json")),
            name=name,
            low=0,
            high=MAX_UNIX_SECONDS,
        )
