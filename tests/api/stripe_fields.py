"""Checks an object the API returns against every field of Stripe's object for an API
version: stripe_reference/stripe_fields_2026-11-18.json (a copy of
../shared/reference/'s, the fields of refund, charge, payment_intent, event,
webhook_endpoint, dispute and balance_transaction as the npm `stripe` 23.2.0 types declare
them for 2026-11-18.endive, with optional and nullable marked, and enum values).

For an older version the fields are that file's, with what Stripe's upgrade notes say the
version had otherwise (OLDER below, written from the notes, not from the code under test).

What `problems` reports, as readable lines (empty: the object conforms):
- a field the object does not have in that version (beside our own `ledger_status`);
- a field it always has (not optional) missing;
- null where the field is not nullable; a value of the wrong kind;
- a string outside the field's enum."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger_app import api_versions

REFERENCE: dict[str, dict[str, dict[str, Any]]] = json.loads(
    (Path(__file__).parent / "stripe_reference" / "stripe_fields_2026-11-18.json").read_text()
)
OWN = {"refund": {"ledger_status"}, "charge": {"ledger_status"}}
# Values Stripe documents for fields its types declare as plain strings.
DOCUMENTED = {
    ("refund", "status"): ["canceled", "failed", "pending", "requires_action", "succeeded"],
    ("refund", "failure_reason"): [
        "charge_for_pending_refund_disputed",
        "declined",
        "expired_or_canceled_card",
        "insufficient_funds",
        "lost_or_stolen_card",
        "merchant_request",
        "unknown",
    ],
    ("webhook_endpoint", "status"): ["disabled", "enabled"],
}
CARD_DESTINATION = {
    "reference_status": {"pending", "available", "unavailable"},
    "type": {"pending", "refund", "reversal"},
}
LIST = {"optional": False, "type": "ApiList", "nullable": False}
ORDER = api_versions.ORDER


def _before(version: str, first: str) -> bool:
    return ORDER[version] < ORDER[first]


def fields_in(name: str, version: str) -> dict[str, dict[str, Any]]:
    """Stripe's fields of object `name` in `version`: the reference's, changed back by the
    upgrade notes for the versions before each change."""
    fields = {key: dict(spec) for key, spec in REFERENCE[name].items()}
    for (owner, key), values in DOCUMENTED.items():
        if owner == name:
            fields[key]["enum"] = values
    backdate = BACKDATED.get(name)
    if backdate is not None:
        backdate(fields, version)
    return fields


def _charge_backdated(fields: dict[str, dict[str, Any]], version: str) -> None:
    if _before(version, "2022-11-15"):  # refunds embedded unasked
        fields["refunds"] = dict(LIST)
    if _before(version, "2014-06-17"):  # an array of refunds, not a list object
        fields["refunds"] = {"optional": False, "type": "Array<Refund>", "nullable": False}
    if _before(version, "2014-12-17"):  # statement_description
        fields["statement_description"] = fields.pop("statement_descriptor")
    if _before(version, "2015-02-18"):  # `card`, and `paid` for succeeded
        fields["card"] = {**fields.pop("source"), "type": "card"}
        fields["status"] = {**fields["status"], "enum": ["failed", "paid", "pending"]}


def _payment_intent_backdated(fields: dict[str, dict[str, Any]], version: str) -> None:
    if _before(version, "2022-11-15"):  # its charges, as a list
        fields["charges"] = dict(LIST)
    if _before(version, "2019-02-11"):  # the statuses' and next_action's older names
        fields["next_source_action"] = fields.pop("next_action")
        renamed = {
            "requires_payment_method": "requires_source",
            "requires_action": "requires_source_action",
        }
        statuses = [renamed.get(s, s) for s in fields["status"]["enum"]]
        fields["status"] = {**fields["status"], "enum": statuses}


def _event_backdated(fields: dict[str, dict[str, Any]], version: str) -> None:
    if _before(version, "2017-05-25"):  # the request's id alone
        fields["request"] = {"optional": False, "type": "string | null", "nullable": True}
    if _before(version, "2024-10-28.acacia"):  # card refunds' events
        types = set(fields["type"]["enum"]) - {"refund.created", "refund.failed"}
        fields["type"] = {**fields["type"], "enum": sorted(types - {"refund.updated"})}


# Each object's fields as an earlier version had them (the upgrade notes), in place.
BACKDATED = {
    "charge": _charge_backdated,
    "payment_intent": _payment_intent_backdated,
    "event": _event_backdated,
}


def problems(obj: Any, name: str, version: str = api_versions.LATEST) -> list[str]:
    """What is wrong with `obj` as Stripe's object `name` in `version`."""
    if not isinstance(obj, dict):
        return [f"{name}: {obj!r} is not an object"]
    found: list[str] = []
    fields = fields_in(name, version)
    for key, value in obj.items():
        spec = fields.get(key)
        if spec is None:
            if key not in OWN.get(name, set()):
                found.append(f"{name}.{key}: not a field of Stripe's {name} in {version}")
            continue
        found.extend(_value_problems(f"{name}.{key}", value, spec))
    if name == "refund" and "destination_details" in obj:
        found.extend(_destination_problems(obj["destination_details"]))
    found.extend(
        f"{name}.{key}: always there in {version}, missing"
        for key, spec in fields.items()
        if not spec["optional"] and key not in obj
    )
    return found


def _value_problems(where: str, value: Any, spec: dict[str, Any]) -> list[str]:
    if value is None:
        return [] if spec["nullable"] else [f"{where}: null, and it is not nullable"]
    kind = spec["type"]
    simple = kind.replace(" | null", "")
    checks = {
        "number": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "Metadata": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        "ApiList": lambda v: isinstance(v, dict) and v.get("object") == "list",
    }
    check = checks.get(simple)
    if simple.startswith("Array<"):
        check = lambda v: isinstance(v, list)  # noqa: E731  # one more kind of check
    if simple.startswith("ApiList<"):
        check = checks["ApiList"]
    if check is not None and not check(value):
        return [f"{where}: {value!r} is not a {kind}"]
    enum = spec.get("enum")
    if enum and isinstance(value, str) and value not in enum:
        return [f"{where}: {value!r} is not one of Stripe's values"]
    return []


def _destination_problems(details: Any) -> list[str]:
    """A card refund's destination_details: `type` card, and its card's reference
    fields with Stripe's values (`reference` only with reference_status available)."""
    if not isinstance(details, dict) or details.get("type") != "card":
        return [f"refund.destination_details: {details!r} is not a card's"]
    card = details.get("card")
    if not isinstance(card, dict) or set(card) - {"reference", *CARD_DESTINATION, "reference_type"}:
        return [f"refund.destination_details.card: {card!r}"]
    found = [
        f"refund.destination_details.card.{key}: {card.get(key)!r}"
        for key, values in CARD_DESTINATION.items()
        if card.get(key) not in values
    ]
    if ("reference" in card) != (card.get("reference_status") == "available"):
        found.append(f"refund.destination_details.card: {card!r} (reference and its status)")
    return found
