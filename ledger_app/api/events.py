"""/v1/events: list events and retrieve one, in the API version asked for. A page of
events reads, once for the page, the refunds older versions show in its charges."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from ledger_app.api.params import EventListParams, RetrieveParams
from ledger_app.api.shared import checked_params, read_schema, retrieved, stale_listing
from ledger_app.api.versions import StripeView, version_of
from ledger_app.events.models import Event
from ledger_app.events.selectors import events_listed
from ledger_app.rendering.events import EventListSerializer, EventSerializer, refunds_now_for


class EventsView(StripeView):
    path_param = None

    @read_schema("events_list", EventListSerializer, EventListParams)
    def get(self, request: Request) -> Response:
        params = checked_params(EventListParams, request.query_params)
        events = events_listed(
            type_name=params.get("type"),
            types=params.get("types"),
            created=params.get("created"),
            version=version_of(request),
        )
        return stale_listing(
            request, events, params, EventSerializer, "/v1/events", prepare=refunds_now
        )


class EventView(StripeView):
    path_param = "event"

    @read_schema("events_retrieve", EventSerializer, RetrieveParams)
    def get(self, request: Request, event_id: str) -> Response:
        return retrieved(request, Event, event_id, EventSerializer)


def refunds_now(events: list[Event], context: dict[str, Any]) -> list[Event]:
    """A page of events, with what older API versions show of their charges' refunds
    read for the page at once (rendering/events.py's refunds_now_for), not once per event."""
    context["refunds_now"] = refunds_now_for(events, context["version"])
    return events
