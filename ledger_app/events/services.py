"""The outbox: an event for every state change of a charge or refund, appended in the
change's own transaction, and a pending delivery for every webhook endpoint that wants it
(of the oldest WEBHOOK_ENDPOINTS_TOTAL enabled ones: no more, whatever the table holds).

Call `record` inside the transaction that makes the change, after the change is written:
if that transaction rolls back, the event and its deliveries go with it; if it commits,
they are there. Nothing is sent here; `deliver_webhooks` sends the deliveries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import connection

from ledger_app import api_versions, sql_writes
from ledger_app.charges.models import Charge
from ledger_app.disputes.models import Dispute
from ledger_app.events import checks as webhook_checks
from ledger_app.events.models import Event, EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.refunds.models import Refund
from ledger_app.rendering.disputes import render_dispute
from ledger_app.rendering.snapshots import object_snapshot, previous_snapshot
from serving.request_id import serving_keys, serving_request_id

# What changed, the object as it is now, and its fields as they were (None: it is new).
Change = tuple[EventType, Charge | Refund, dict[str, Any] | None]


def record(
    event_type: EventType,
    obj: Charge | Refund,
    *,
    previous: dict[str, Any] | None = None,
    idempotency_key: str = "",
) -> Event:
    """Append the event for a change just written to `obj`. `previous` holds the model
    fields the change moved, as they were before it; the event's `previous_attributes`
    are what that changed in the API's terms (snapshots.previous_snapshot)."""
    return record_many([(event_type, obj, previous)], idempotency_key=idempotency_key)[0]


def record_many(
    changes: list[tuple[EventType, Charge | Refund, dict[str, Any] | None]],
    *,
    idempotency_key: str = "",
    endpoints: list[WebhookEndpoint] | None = None,
) -> list[Event]:
    """The events of one change that tells several things, written now through the ORM
    (the reserve and the settles, which every refund runs, write theirs together with
    their other rows in one round trip, through `event_writes`). `endpoints`: the live
    ones, when the caller read them before its locks."""
    if not connection.in_atomic_block:
        raise RuntimeError("an event is recorded in the transaction of its change")
    events, deliveries = build_many(changes, idempotency_key=idempotency_key, endpoints=endpoints)
    Event.objects.bulk_create(events)
    WebhookDelivery.objects.bulk_create(deliveries)
    return events


def record_disputed(
    changes: list[tuple[EventType, Dispute]], *, endpoints: list[WebhookEndpoint]
) -> list[Event]:
    """The events of a dispute's change (charge.dispute.*), each carrying the dispute as
    it is now, written in the change's transaction; `endpoints`: the live ones, read
    before the charge's lock."""
    if not connection.in_atomic_block:
        raise RuntimeError("an event is recorded in the transaction of its change")
    endpoints = capped(endpoints)
    events = [
        Event(
            type=event_type,
            data_object=render_dispute(dispute),
            request_id=serving_request_id.get(),
            charge_id=dispute.charge_id,
        )
        for event_type, dispute in changes
    ]
    deliveries = [
        WebhookDelivery(event=event, endpoint=endpoint, next_attempt_at=event.created_at)
        for event in events
        for endpoint in endpoints
        if endpoint.wants(event.type)
    ]
    Event.objects.bulk_create(events)
    WebhookDelivery.objects.bulk_create(deliveries)
    return events


def event_writes(
    changes: Sequence[Change],
    *,
    idempotency_key: str = "",
    endpoints: list[WebhookEndpoint] | None = None,
    newest_refunds: dict[str, list[Refund]] | None = None,
) -> list[sql_writes.Statement | None]:
    """The INSERTs of these changes' events and deliveries, for the caller to run with
    the change's other statements (`writes.execute_together`), in its transaction. Call
    it after the change is made on the objects: their snapshots are taken here."""
    events, deliveries = build_many(
        changes,
        idempotency_key=idempotency_key,
        endpoints=endpoints,
        newest_refunds=newest_refunds,
    )
    return [sql_writes.insert(events), sql_writes.insert(deliveries)]


def build_many(
    changes: Sequence[Change],
    *,
    idempotency_key: str = "",
    endpoints: list[WebhookEndpoint] | None = None,
    newest_refunds: dict[str, list[Refund]] | None = None,
) -> tuple[list[Event], list[WebhookDelivery]]:
    """The events of these changes (in order, each object rendered once) and a pending
    delivery for each endpoint that wants one, not yet written. `endpoints` lets a caller
    read the live endpoints before it takes a lock; `newest_refunds` (by charge id) the
    refunds a charge's snapshot embeds, when the caller has them."""
    endpoints = capped(live_endpoints() if endpoints is None else endpoints)
    snapshot = _snapshots(changes, endpoints, newest_refunds or {})
    events = [
        Event(
            type=event_type,
            data_object=snapshot(obj, event_type),
            previous_attributes=(
                None
                if previous is None
                else previous_snapshot(obj, previous, snapshot(obj, event_type))
            ),
            request_id=serving_request_id.get(),
            request_idempotency_key=_request_key(event_type, obj, idempotency_key),
            charge=obj if isinstance(obj, Charge) else obj.charge,
            refund=obj if isinstance(obj, Refund) else None,
        )
        for event_type, obj, previous in changes
    ]
    deliveries = [
        WebhookDelivery(event=event, endpoint=endpoint, next_attempt_at=event.created_at)
        for event in events
        for endpoint in endpoints
        if endpoint.wants(event.type)
    ]
    return events, deliveries


def _snapshots(
    changes: Sequence[Change],
    endpoints: list[WebhookEndpoint],
    newest_refunds: dict[str, list[Refund]],
) -> Callable[[Charge | Refund, EventType], dict[str, Any]]:
    """How build_many renders an object for an event of a type: each object once (a
    charge once with its refunds, for the types an endpoint on an older version gets, and
    once without)."""
    rendered: dict[tuple[type, str], dict[str, Any]] = {}
    embed = {event_type for event_type, _, _ in changes if embeds_refunds(endpoints, event_type)}

    def snapshot(obj: Charge | Refund, event_type: EventType) -> dict[str, Any]:
        embedded = isinstance(obj, Charge) and event_type in embed
        key = (type(obj), f"{obj.pk}:{embedded}")
        if key not in rendered:  # each object rendered once, however many events name it
            rendered[key] = (
                object_snapshot(
                    obj, newest_refunds=newest_refunds.get(obj.pk), embed_refunds=embedded
                )
                if isinstance(obj, Charge)
                else object_snapshot(obj)
            )
        return rendered[key]

    return snapshot


def capped(endpoints: list[WebhookEndpoint]) -> list[WebhookEndpoint]:
    """At most WEBHOOK_ENDPOINTS_TOTAL endpoints, the first of those given (live_endpoints
    gives the oldest): each event is written for no more, whatever the table holds. At
    the limit, webhook_checks counts once per process those left out and warns."""
    total = settings.WEBHOOK_ENDPOINTS_TOTAL
    if len(endpoints) >= total:
        webhook_checks.note_full_fan_out()
    return endpoints[:total]


def embeds_refunds(endpoints: list[WebhookEndpoint], event_type: EventType) -> bool:
    """Whether a charge's snapshot in an event of this type embeds its refunds: only when
    an endpoint that will be sent it is on an API version before 2022-11-15 (reading a
    charge's newest refunds, inside its lock, is what the others no longer need)."""
    return any(
        api_versions.embeds_refunds(endpoint.api_version)
        for endpoint in endpoints
        if endpoint.wants(event_type)
    )


def _request_key(event_type: EventType, obj: Charge | Refund, given: str) -> str:
    """The Idempotency-Key an event names: the one its change was made with, or, for a
    later change of a refund created in the same HTTP request (its inline settle), the key
    that created it. The worker, the reconciler, commands and other requests name none."""
    keys = serving_keys.get()
    if keys is None or not isinstance(obj, Refund):
        return given or ""
    if given and event_type == EventType.REFUND_CREATED:
        keys[obj.pk] = given
    return given or keys.get(obj.pk, "")
