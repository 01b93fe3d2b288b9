"""The outbox: an event for every state change of a charge or refund, appended in the
change's own transaction, and a pending delivery for every webhook endpoint that wants it.

Call `record` inside the transaction that makes the change, after the change is written:
if that transaction rolls back, the event and its deliveries go with it; if it commits,
they are there. Nothing is sent here; `deliver_webhooks` sends the deliveries.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from backoffice.request_id import serving_request_id
from ledger_app.models import Charge, Event, EventType, Refund, WebhookDelivery
from ledger_app.selectors import live_endpoints
from ledger_app.stripe_objects import ChargeSerializer, RefundSerializer


def record(
    event_type: EventType,
    obj: Charge | Refund,
    *,
    previous: dict[str, Any] | None = None,
    idempotency_key: str = "",
) -> Event:
    """Append the event for a change just written to `obj`. `previous` holds the fields
    the change moved, as they were before it (Stripe's `previous_attributes`)."""
    if not connection.in_atomic_block:
        raise RuntimeError("an event is recorded in the transaction of its change")
    event = Event.objects.create(
        type=event_type,
        data_object=snapshot(obj),
        previous_attributes=previous,
        request_id=serving_request_id.get(),
        request_idempotency_key=idempotency_key or "",
        charge=obj if isinstance(obj, Charge) else obj.charge,
        refund=obj if isinstance(obj, Refund) else None,
    )
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(event=event, endpoint=endpoint, next_attempt_at=event.created_at)
        for endpoint in live_endpoints()
        if endpoint.wants(event_type)
    )
    return event


def snapshot(obj: Charge | Refund) -> dict[str, Any]:
    """The object as the API shows it now, as plain JSON."""
    serializer = ChargeSerializer if isinstance(obj, Charge) else RefundSerializer
    return json.loads(json.dumps(serializer(obj, context={"expand": ()}).data))
