"""What the services record of an object as Stripe shows it: the one place they render an
event's `data.object` and a delivery's body. What to render is passed in, a charge's
newest refunds included when the caller has just read them, so no service reaches into
the API's serializers (stripe_objects.py) or hands them data on the side."""

from __future__ import annotations

from typing import Any

from ledger_app.charges.models import Charge
from ledger_app.events.models import Event
from ledger_app.refunds.models import Refund
from ledger_app.rendering import stripe_objects

# How many of its newest refunds a charge embeds (the API's answer and the snapshot alike).
EMBEDDED_REFUNDS = stripe_objects.EMBEDDED_REFUNDS


def object_snapshot(
    obj: Charge | Refund,
    *,
    newest_refunds: list[Refund] | None = None,
    embed_refunds: bool = True,
) -> dict[str, Any]:
    """The object as the API shows it now, as plain JSON. A charge embeds its refunds
    only with `embed_refunds` (an endpoint on an API version before 2022-11-15 will be
    sent it): `newest_refunds` (newest first, at most EMBEDDED_REFUNDS + 1) when given,
    else the ones read now."""
    # Plain JSON values in containers of its own: stored as they are, no copy needed.
    return stripe_objects.plain(obj, newest_refunds=newest_refunds, embed_refunds=embed_refunds)


def previous_snapshot(
    obj: Charge | Refund, moved: dict[str, Any], snapshot: dict[str, Any]
) -> dict[str, Any]:
    """An event's `previous_attributes`: what the fields `moved` (model fields, as they
    were) changed in the object's `snapshot`, as the API showed them before."""
    return stripe_objects.shown_previous(obj, moved, snapshot)


def delivery_body(event: Event, version: str) -> str:
    """The body of a webhook delivery: the event as the API shows it now, in the
    endpoint's API version."""
    return stripe_objects.event_body(event, version)
