"""Checks an object the API returns against Stripe's published schema for it
(stripe_reference/stripe_fields_2026.json: the properties of stripe/openapi's spec3.json
at af5309c, version 2026-07-29.dahlia, without descriptions).

What `problems` reports, as a list of readable lines (empty: the object conforms):
- a field Stripe's object does not have (other than the few extension fields of our own
  that docs/api.md lists, EXTENSIONS);
- a required field missing;
- a value of the wrong type, null where the schema does not allow null, or a string
  outside the field's `enum` or `x-documented-values`;
- the same, recursively, for nested objects the file describes. A `$ref` to a schema
  the file does not hold must still be an object (or, inside `anyOf`, match another
  branch, such as an id string)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.api.stripe_package_fields import package_params

REFERENCE = json.loads(
    (Path(__file__).parent / "stripe_reference" / "stripe_fields_2026.json").read_text()
)
SCHEMAS: dict[str, dict[str, Any]] = REFERENCE["schemas"]
# Stripe's parameters of every endpoint served here: the reference's, and those of the
# balance transactions and payouts, which it lacks, as the stripe package declares them.
PARAMS: dict[str, list[str]] = {**SCHEMAS["params"], **package_params()}

# Fields of our own, beside Stripe's (docs/api.md, "Fields of our own"), and Stripe's own
# fields newer than this file (stripe_fields_2026-11-18.json has them: stripe_fields.py).
EXTENSIONS = {
    "refund": {"ledger_status", "application"},
    "charge": {"ledger_status", "source"},
}


# Fields the current API version leaves out unless expanded (a charge's refunds, since
# 2022-11-15), though the schema has them nullable.
LEFT_OUT_UNLESS_EXPANDED = {"charge": {"refunds"}}


def always_shown(name: str) -> set[str]:
    """The fields Stripe's object `name` always has in the current API version: the
    required ones, and those that may be null (Stripe shows null rather than leaving them
    out), but for those it leaves out unless expanded."""
    schema = SCHEMAS[name]
    nullable = {key for key, field in schema["properties"].items() if field.get("nullable")}
    shown = set(schema.get("required", ())) | nullable
    return shown - LEFT_OUT_UNLESS_EXPANDED.get(name, set())


def problems(obj: Any, name: str) -> list[str]:
    """What is wrong with `obj` as Stripe's object `name` ("refund", "charge", "event",
    "webhook_endpoint", "error")."""
    found: list[str] = []
    _check_object(obj, SCHEMAS[name], name, name, found)
    return found


def _check_object(obj: Any, schema: dict, name: str | None, where: str, found: list[str]) -> None:
    if not isinstance(obj, dict):
        found.append(f"{where}: {obj!r} is not an object")
        return
    properties = schema.get("properties")
    if properties is None:  # a free-form object (metadata's additionalProperties)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, value in obj.items():
                _check_value(value, extra, f"{where}.{key}", found)
        return
    allowed = EXTENSIONS.get(name or "", set())
    for key, value in obj.items():
        if key in properties:
            _check_value(value, properties[key], f"{where}.{key}", found)
        elif key not in allowed:
            found.append(f"{where}.{key}: not a field of Stripe's object")
    for key in schema.get("required", ()):
        if key not in obj:
            found.append(f"{where}.{key}: required, missing")


def _check_value(value: Any, schema: dict, where: str, found: list[str]) -> None:
    if value is None:
        if not schema.get("nullable"):
            found.append(f"{where}: null, and the schema does not allow null")
        return
    if "anyOf" in schema:
        _check_any_of(value, schema["anyOf"], where, found)
    elif "$ref" in schema:
        _check_reference(value, schema["$ref"].rsplit("/", 1)[-1], where, found)
    else:
        _check_typed(value, schema, where, found)


def _check_any_of(value: Any, branches: list[dict], where: str, found: list[str]) -> None:
    for branch in branches:
        attempt: list[str] = []
        _check_value(value, branch, where, attempt)
        if not attempt:
            return
    found.append(f"{where}: {value!r} matches none of {branches}")


def _check_reference(value: Any, target: str, where: str, found: list[str]) -> None:
    if target in SCHEMAS:
        _check_object(value, SCHEMAS[target], target, where, found)
    elif not isinstance(value, dict):
        found.append(f"{where}: {value!r} is not a {target} object")


def _check_typed(value: Any, schema: dict, where: str, found: list[str]) -> None:
    kind = schema.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind in checks and not checks[kind](value):
        found.append(f"{where}: {value!r} is not a {kind}")
        return
    choices = schema.get("enum") or schema.get("x-documented-values")
    if kind == "string" and choices and value not in choices:
        found.append(f"{where}: {value!r} is not one of {choices}")
    if kind == "array":
        for index, item in enumerate(value):
            _check_value(item, schema.get("items", {}), f"{where}[{index}]", found)
    if kind == "object":
        _check_object(value, schema, None, where, found)
