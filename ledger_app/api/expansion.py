"""Stripe's `expand[]`: an id in an answer replaced by the object it names, for the fields
the ledger holds.

- a refund: `charge` (the charge, as GET /v1/charges/{id} shows it) and `payment_intent`;
- a charge: `refunds` (its 100 newest, rather than 10; rendering/charges.py's ChargeSerializer)
  and `payment_intent`;
- a PaymentIntent: `latest_charge`;
- a list: `data.<field>`, the same for every object of the page, fetched in one query per
  field for the page.

Anything else is refused by the endpoint's Expand field, as Stripe refuses it
(`This property cannot be expanded`). Expanding is done on the rendered answer, so the
serializers stay those of the unexpanded objects (and of events' snapshots)."""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

from ledger_app import api_versions
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import latest_charges_of
from ledger_app.refunds.selectors import with_first_refunds
from ledger_app.rendering.charges import EMBEDDED_REFUNDS
from ledger_app.rendering.payment_intents import payment_intent_in
from ledger_app.rendering.snapshots import object_snapshot

REFUND_FIELDS = frozenset({"charge", "payment_intent"})
INTENT_FIELDS = frozenset({"latest_charge"})
CHARGE_FIELDS = frozenset({"refunds", "payment_intent"})
# `refunds` is the serializer's own: it reads 100 refunds rather than 10.
SERIALIZER_EXPANDS = frozenset({"refunds"})


def in_list(fields: frozenset[str]) -> frozenset[str]:
    """What a list of such objects may expand: `data.<field>`."""
    return frozenset(f"data.{name}" for name in fields)


def of_items(asked: set[str]) -> set[str]:
    """The expansions a list asked for, as each of its objects takes them."""
    return {name.removeprefix("data.") for name in asked if name.startswith("data.")}


def expand(
    items: list[dict[str, Any]],
    asked: set[str],
    using: str = DEFAULT_DB_ALIAS,
    version: str = api_versions.LATEST,
) -> list[dict[str, Any]]:
    """Replace, in these rendered refunds or charges, the ids `asked` names by their
    objects, shown in the API `version` (in place; also returned)."""
    embed_refunds = api_versions.embeds_refunds(version)
    for field in ("charge", "latest_charge"):
        if field in asked:
            _expand_charges(items, using, embed_refunds, field)
    if "payment_intent" in asked:
        _expand_intents(items, using, version)
    return items


def _expand_charges(
    items: list[dict[str, Any]], using: str, embed_refunds: bool, field: str = "charge"
) -> None:
    ids = {item[field] for item in items if isinstance(item.get(field), str)}
    charges = list(Charge.objects.using(using).filter(pk__in=ids))
    if embed_refunds:
        charges = with_first_refunds(charges, EMBEDDED_REFUNDS + 1)
    shown = {c.pk: object_snapshot(c, embed_refunds=embed_refunds) for c in charges}
    for item in items:
        if isinstance(item.get(field), str):
            item[field] = shown[item[field]]


def _expand_intents(items: list[dict[str, Any]], using: str, version: str) -> None:
    ids = {item["payment_intent"] for item in items if isinstance(item.get("payment_intent"), str)}
    latest = latest_charges_of(ids, using)
    for item in items:
        intent = item.get("payment_intent")
        if isinstance(intent, str) and intent in latest:
            item["payment_intent"] = payment_intent_in(latest[intent], version, using)
