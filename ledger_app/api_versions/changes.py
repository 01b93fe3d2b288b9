"""What Stripe's API versions changed in the objects the back office serves (charge,
refund, PaymentIntent, event, webhook endpoint): each change with the first version that
has today's behaviour, and how versions before it showed the object.

Objects are rendered in today's shape; `older` turns one into what versions before the
change showed, as a pure function of the rendered object (api_versions.shown_in applies
them, newest change first). Two changes need rows today's shape does not hold (a charge's
refunds, a PaymentIntent's charges): those are read where the object is rendered, asked
through api_versions.embeds_refunds and embeds_charges, and marked `read_when_rendered`.
Event types are in `events_told_as`: what versions before the change call an event we
record (None: those versions were not sent it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

Shape = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Change:
    version: str  # the first version with today's behaviour
    touches: str  # the object's `object`: charge, refund, payment_intent, event, webhook_endpoint
    what: str  # the change, as docs/api.md lists it
    older: Shape | None = None
    events_told_as: Mapping[str, str | None] = field(default_factory=dict)
    read_when_rendered: bool = False


def _request_as_id(event: dict[str, Any]) -> dict[str, Any]:
    request = event.get("request")
    return {**event, "request": request.get("id") if isinstance(request, dict) else request}


def _refunds_as_array(charge: dict[str, Any]) -> dict[str, Any]:
    refunds = charge.get("refunds")
    if not isinstance(refunds, dict):
        return charge
    return {**charge, "refunds": refunds.get("data", [])}


def _statement_description(charge: dict[str, Any]) -> dict[str, Any]:
    """A charge before 2014-12-17: `statement_description` where `statement_descriptor` is."""
    return {
        ("statement_description" if name == "statement_descriptor" else name): value
        for name, value in charge.items()
    }


def _before_sources(charge: dict[str, Any]) -> dict[str, Any]:
    """A charge before 2015-02-18: `paid` for succeeded, and `card` where `source` is."""
    shown = {("card" if name == "source" else name): value for name, value in charge.items()}
    if shown.get("status") == "succeeded":
        shown["status"] = "paid"
    return shown


INTENT_STATUSES_BEFORE_2019_02_11 = MappingProxyType(
    {"requires_payment_method": "requires_source", "requires_action": "requires_source_action"}
)


def _intent_before_payment_methods(intent: dict[str, Any]) -> dict[str, Any]:
    """A PaymentIntent before 2019-02-11: its statuses' and `next_action`'s older names."""
    shown = {
        ("next_source_action" if name == "next_action" else name): value
        for name, value in intent.items()
    }
    status = str(shown.get("status"))
    shown["status"] = INTENT_STATUSES_BEFORE_2019_02_11.get(status, status)
    return shown


CARD_REFUND_EVENTS = MappingProxyType(
    {"refund.created": None, "refund.updated": "charge.refund.updated", "refund.failed": None}
)

CHANGES: tuple[Change, ...] = (
    Change(
        "2014-06-17",
        "charge",
        "a charge's embedded `refunds` is a list object (`data`, `has_more`, `url`); "
        "before, an array of refunds",
        older=_refunds_as_array,
    ),
    Change(
        "2014-12-17",
        "charge",
        "a charge's `statement_descriptor`; before, `statement_description`",
        older=_statement_description,
    ),
    Change(
        "2015-02-18",
        "charge",
        "a succeeded charge's `status` is `succeeded` and its payment source is `source`; "
        "before, `paid` and `card`",
        older=_before_sources,
    ),
    Change(
        "2017-05-25",
        "event",
        "an event's `request` is an object (`id`, `idempotency_key`); before, the "
        "request's id (a string, or null)",
        older=_request_as_id,
    ),
    Change(
        "2019-02-11",
        "payment_intent",
        "a PaymentIntent's statuses `requires_payment_method` and `requires_action`, and "
        "`next_action`; before, `requires_source`, `requires_source_action` and "
        "`next_source_action`",
        older=_intent_before_payment_methods,
    ),
    Change(
        "2022-11-15",
        "charge",
        "a charge no longer embeds its `refunds` (expand[]=refunds brings them); before, "
        "its 10 newest, with `has_more` and `url`",
        read_when_rendered=True,
    ),
    Change(
        "2022-11-15",
        "payment_intent",
        "a PaymentIntent no longer carries `charges` (`latest_charge` names its newest); "
        "before, a list of its charges, newest first",
        read_when_rendered=True,
    ),
    Change(
        "2024-10-28.acacia",
        "event",
        "a card refund's changes are `refund.created`, `refund.updated` and `refund.failed`; "
        "before, `charge.refund.updated` told its updates (and no event its creation or "
        "failure apart from that update)",
        events_told_as=CARD_REFUND_EVENTS,
    ),
)
