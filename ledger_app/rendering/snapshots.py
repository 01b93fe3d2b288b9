"""What the services record of an object as Stripe shows it: the one place they render an
event's `data.object` and its `previous_attributes`. What to render is passed in, a
charge's newest refunds included when the caller has just read them, so no service hands
the API's serializers data on the side. A webhook delivery's body is rendering/events.py's
delivery_body."""

from __future__ import annotations

import copy
from typing import Any

from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund
from ledger_app.rendering.charges import (
    EMBEDDED_REFUNDS,
    read_newest_refunds,
    refund_list,
    render_charge,
)
from ledger_app.rendering.refunds import render_refund


def object_snapshot(
    obj: Charge | Refund,
    *,
    newest_refunds: list[Refund] | None = None,
    embed_refunds: bool = True,
) -> dict[str, Any]:
    """The object as GET /v1/charges/{id} or /v1/refunds/{id} shows it with no expand[]:
    what an event's `data.object` holds and what a charge embeds of its refunds. A charge
    embeds its refunds only with `embed_refunds` (older API versions): then
    `newest_refunds` (newest first, EMBEDDED_REFUNDS + 1 at most) are the ones it embeds,
    when the caller has them; without them they are read. Plain JSON values in containers
    of its own: an event stores them as they are, no copy needed."""
    if not isinstance(obj, Charge):
        return render_refund(obj)
    if not embed_refunds:
        return render_charge(obj)
    if newest_refunds is None:
        newest_refunds = read_newest_refunds(obj, EMBEDDED_REFUNDS + 1)
    return render_charge(obj, refunds=refund_list(obj, newest_refunds, EMBEDDED_REFUNDS))


def previous_snapshot(
    obj: Charge | Refund, moved: dict[str, Any], shown_now: dict[str, Any]
) -> dict[str, Any]:
    """Stripe's `previous_attributes` for a change that moved `moved` (model fields, as
    they were) on `obj`, now shown as `shown_now`: the fields the API shows differently,
    as it showed them before (null for a field it left out). A status move can change
    several fields (status, ledger_status, pending_reason, destination_details) or, from
    one pending to another, only ledger_status; a card reference given, only
    destination_details. Other moves (amount_refunded, metadata) are already in the API's
    terms and are passed on as they are."""
    if not {"status", "destination_reference"} & set(moved):
        return moved
    before = copy.copy(obj)
    for name, value in moved.items():
        if name in MOVABLE_FIELDS:
            setattr(before, name, value)
    shown_before = object_snapshot(before, embed_refunds=False)
    names = (set(shown_before) | set(shown_now)) - {"refunds"}
    return {
        name: shown_before.get(name)
        for name in sorted(names)
        if shown_before.get(name) != shown_now.get(name)
    }


MOVABLE_FIELDS = frozenset(
    {"status", "status_detail", "amount_refunded", "metadata", "destination_reference"}
)
