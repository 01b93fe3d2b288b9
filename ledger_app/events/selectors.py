"""Reads of events and webhook endpoints: the endpoints an event fans out to, the
deliveries a worker may claim, the API's event list."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from django.conf import settings
from django.db.models import (
    BigIntegerField,
    Count,
    F,
    Q,
    QuerySet,
    Window,
)
from django.db.models.functions import RowNumber

from ledger_app import api_versions
from ledger_app.compiled import precompiled
from ledger_app.events.models import Event, EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.leases import lease_free
from ledger_app.paging import created_in
from ledger_app.text import has_unstorable_characters


def live_endpoints() -> list[WebhookEndpoint]:
    """Webhook endpoints that receive events: the oldest WEBHOOK_ENDPOINTS_TOTAL of those
    enabled and not deleted (by created_at, then id). Every event is written once per
    endpoint here, in its change's transaction, so this bounds that work whatever the
    table holds: endpoints made before the limits existed, or past a setting lowered
    since, are sent nothing (`enabled_endpoints_past_the_limit`). Every refund reads
    them: the query is precompiled, with the limit as its parameter."""
    return _live_endpoints(settings.WEBHOOK_ENDPOINTS_TOTAL)


def _enabled_endpoints() -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(
        status=WebhookEndpoint.Status.ENABLED, deleted_at__isnull=True
    )


@precompiled
def _live_endpoints(total: int) -> QuerySet[WebhookEndpoint]:
    oldest_first = [F("created_at").asc(), F("id").asc()]
    place = Window(RowNumber(), order_by=oldest_first, output_field=BigIntegerField())
    return (
        _enabled_endpoints()
        .alias(place=place)
        .filter(place__lte=total)
        .order_by("created_at", "id")
    )


def receiving_endpoints() -> QuerySet[WebhookEndpoint]:
    """What `live_endpoints` reads, as a queryset (the admin marks the others)."""
    return _enabled_endpoints().order_by("created_at", "id")[: settings.WEBHOOK_ENDPOINTS_TOTAL]


def enabled_endpoints_past_the_limit() -> int:
    """How many enabled endpoints are sent no event, being past WEBHOOK_ENDPOINTS_TOTAL."""
    return max(0, _enabled_endpoints().count() - settings.WEBHOOK_ENDPOINTS_TOTAL)


def webhook_endpoints() -> QuerySet[WebhookEndpoint]:
    """Webhook endpoints the API lists and finds: all but the deleted."""
    return WebhookEndpoint.objects.filter(deleted_at__isnull=True)


def webhook_endpoint(endpoint_id: str) -> WebhookEndpoint | None:
    """The endpoint with this id, unless it was deleted."""
    return webhook_endpoints().filter(pk=endpoint_id).first()


def due_deliveries(now: datetime, due_at: datetime | None = None) -> QuerySet[WebhookDelivery]:
    """Deliveries a webhook worker may claim: pending, due by `due_at` (default now), held
    by no worker, to an endpoint that is enabled and not deleted. A disabled endpoint's
    deliveries wait; a deleted one's are canceled when it is deleted."""
    return WebhookDelivery.objects.filter(
        lease_free(now),
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at__lte=due_at or now,
        endpoint__status=WebhookEndpoint.Status.ENABLED,
        endpoint__deleted_at__isnull=True,
    )


def events_listed(
    *,
    type_name: str | None = None,
    types: list[str] | None = None,
    created: dict[str, int] | None = None,
    version: str | None = None,
) -> QuerySet[Event]:
    """Events of a type (`charge.*`: every type under charge; `*`: all) or of any of
    `types`, created within `created` (see created_in), each with `pending_webhooks`: how
    many of its deliveries are still pending. Types are as the API `version` names them
    (api_versions.told_as): an older one calls some events otherwise, and is told none of
    some others."""
    events = Event.objects.filter(created_in(created)).annotate(
        pending_webhooks=Count(
            "deliveries", filter=Q(deliveries__status=WebhookDelivery.Status.PENDING)
        )
    )
    asked = [*(types or []), *([type_name] if type_name is not None else [])]
    if any(has_unstorable_characters(name) for name in asked):
        return events.none()  # no event has such a type (and PostgreSQL cannot compare it)
    if version is not None:
        recorded = list(EventType.values)
        wanted = partial(_type_wanted, type_name=type_name, types=types)
        chosen = api_versions.recorded_types(version, recorded, wanted)
        if chosen != recorded:
            return events.filter(type__in=chosen)
    return _of_types(events, type_name, types)


def _type_wanted(told: str, *, type_name: str | None, types: list[str] | None) -> bool:
    """Whether events of a type, as the API version tells it, are among those asked for."""
    if types is not None and told not in types:
        return False
    if type_name is None or type_name == "*":
        return True
    if type_name.endswith(".*"):
        return told.startswith(type_name[:-1])
    return told == type_name


def _of_types(
    events: QuerySet[Event], type_name: str | None, types: list[str] | None
) -> QuerySet[Event]:
    """`events` of the types asked for, as they are recorded."""
    if types is not None:
        events = events.filter(type__in=types)
    if type_name is None or type_name == "*":
        return events
    if type_name.endswith(".*"):
        return events.filter(type__startswith=type_name[:-1])
    return events.filter(type=type_name)
