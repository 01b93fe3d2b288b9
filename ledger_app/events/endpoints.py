"""Webhook endpoints: the URLs client systems register (through the API or the admin) to
be sent the events they choose, each with its own signing secret. Which URLs may receive
is services/egress.py's to say; delivery is services/webhook_delivery.py's."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from ledger_app import api_versions, errors
from ledger_app.access.models import ApiKey
from ledger_app.db import is_lock_timeout
from ledger_app.errors import DeliveryNotResendable, InvalidEnabledEvents, InvalidWebhookUrl
from ledger_app.events import egress
from ledger_app.events.event_types import STRIPE_EVENT_TYPES
from ledger_app.events.models import EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.events.selectors import webhook_endpoints
from ledger_app.validation import merge_metadata, validate_metadata, validate_text

log = logging.getLogger("ledger_app.webhooks")

ALL_EVENTS = "*"
# The PostgreSQL advisory lock (a pair of keys of this app's own) that creating an endpoint
# holds while it counts and inserts, so two creates cannot both take the last place.
CREATE_LOCK = (0x7765, 1)


def check_url(url: object) -> str:
    """An http(s) URL that may receive webhooks now (services/egress.py says which)."""
    try:
        egress.check(url)
    except egress.Refused as refused:
        raise InvalidWebhookUrl(f"The URL is refused: {refused.reason}.") from None
    return url  # type: ignore[return-value]  # a str: egress.check refuses anything else


def check_enabled_events(enabled_events: object) -> list[str]:
    """Event types Stripe documents or "*", at least one, each once, in the order sent.
    An endpoint is sent the ones the back office emits (models.EventType)."""
    if not isinstance(enabled_events, list) or not enabled_events:
        raise InvalidEnabledEvents()
    allowed = {ALL_EVENTS, *STRIPE_EVENT_TYPES, *EventType.values}
    for name in enabled_events:
        if not isinstance(name, str) or name not in allowed:
            shown = str(name)[:64] if isinstance(name, str) else type(name).__name__
            raise InvalidEnabledEvents(
                f"Unknown event type in enabled_events: {shown!r}. "
                + InvalidEnabledEvents.default_message
            )
    return list(dict.fromkeys(enabled_events))


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def create_endpoint(
    *,
    url: str,
    enabled_events: list[str],
    description: str | None = None,
    metadata: dict[str, str] | None = None,
    api_version: str | None = None,
    api_key: ApiKey | None = None,
) -> WebhookEndpoint:
    """A new enabled endpoint, with its signing secret (shown to the client only now).
    It receives the events recorded from now on, rendered in `api_version`: any published
    version, or the account default (DEFAULT_API_VERSION) when None, as Stripe's.

    `api_key` made it (None: the back office itself). Every event is written once per
    endpoint in its change's transaction, so the endpoints are limited: at most
    WEBHOOK_ENDPOINTS_PER_KEY made by one key, at most WEBHOOK_ENDPOINTS_TOTAL in all,
    disabled ones included and deleted ones not (as Stripe counts). Past either the
    create is refused and writes nothing. The fan-out itself is capped too, for tables
    that hold more (made before the limits, or a setting lowered since): each event goes
    to the oldest WEBHOOK_ENDPOINTS_TOTAL enabled endpoints only (services/events.py,
    services/webhook_checks.py)."""
    answered = api_versions.chosen(api_version)
    if answered is None:
        raise errors.InvalidApiVersion(api_versions.unsupported_message(str(api_version)))
    endpoint = WebhookEndpoint(
        api_version=answered,
        url=check_url(url),
        enabled_events=check_enabled_events(enabled_events),
        description=validate_text(description, errors.InvalidDescription),
        metadata=validate_metadata(metadata),
        secret=new_secret(),
        api_key=api_key,
    )
    with transaction.atomic(durable=True):
        _lock_endpoint_creation()
        _check_room_for_one_more(api_key)
        endpoint.save(force_insert=True)
    log.info("webhook endpoint %s created for %s", endpoint.pk, endpoint.url)
    return endpoint


def _lock_endpoint_creation() -> None:
    """Serialise endpoint creation for the rest of the transaction: the counts are read
    and added to by one create at a time. (SQLite's IMMEDIATE transactions already
    serialise every write.)"""
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(CREATE_LOCK))
    except OperationalError as exc:  # past DATABASE_LOCK_TIMEOUT_MS
        if is_lock_timeout(exc):
            raise errors.WebhookEndpointsBusy() from exc
        raise


def _check_room_for_one_more(api_key: ApiKey | None) -> None:
    """Refuse a new endpoint past either limit; the key's own first, as it is the one
    its client can act on."""
    existing = webhook_endpoints()
    per_key = settings.WEBHOOK_ENDPOINTS_PER_KEY
    if api_key is not None and existing.filter(api_key=api_key).count() >= per_key:
        raise errors.WebhookEndpointLimitReached(
            f"This API key already has {per_key} webhook endpoints, the most one key may "
            "have (disabled ones count). Delete one it no longer uses first."
        )
    total = settings.WEBHOOK_ENDPOINTS_TOTAL
    if existing.count() >= total:
        raise errors.WebhookEndpointLimitReached(
            f"There are already {total} webhook endpoints, the most this account may have "
            "(disabled ones count). Delete one no longer used first."
        )


@dataclass(frozen=True)
class EndpointChanges:
    """What an update sends; None is "leave it as it is"."""

    url: str | None = None
    enabled_events: list[str] | None = None
    description: str | None = None
    metadata: dict[str, str] | None = None
    disabled: bool | None = None

    def checked(self) -> dict[str, Any]:
        """The fields to set, each checked (the URL resolved) before any row is locked."""
        fields: dict[str, Any] = {}
        if self.url is not None:
            fields["url"] = check_url(self.url)
        if self.enabled_events is not None:
            fields["enabled_events"] = check_enabled_events(self.enabled_events)
        if self.description is not None:
            fields["description"] = validate_text(self.description, errors.InvalidDescription)
        if self.disabled is not None:
            status = WebhookEndpoint.Status
            fields["status"] = status.DISABLED if self.disabled else status.ENABLED
        return fields


def update_endpoint(endpoint_id: str, changes: EndpointChanges) -> WebhookEndpoint:
    """Stripe's endpoint update. Metadata is merged into what is there, a key sent empty
    is removed (as for refunds). A disabled endpoint is sent nothing; its deliveries wait
    for it to be enabled again. Pending deliveries go to the URL as it is when sent."""
    if changes.metadata is not None and not isinstance(changes.metadata, dict):
        raise errors.InvalidMetadata()
    fields = changes.checked()
    with transaction.atomic(durable=True):
        endpoint = _locked_endpoint(endpoint_id)
        if changes.metadata is not None:
            fields["metadata"] = merge_metadata(endpoint.metadata, changes.metadata)
        for name, value in fields.items():
            setattr(endpoint, name, value)
        endpoint.save(update_fields=list(fields))
    return endpoint


def delete_endpoint(endpoint_id: str) -> WebhookEndpoint:
    """The endpoint receives nothing more: it is marked deleted (and is then missing to
    the API) and its pending deliveries are canceled, in one transaction."""
    with transaction.atomic(durable=True):
        endpoint = _locked_endpoint(endpoint_id)
        endpoint.deleted_at = timezone.now()
        endpoint.save(update_fields=["deleted_at"])
        canceled = endpoint.deliveries.filter(status=WebhookDelivery.Status.PENDING).update(
            status=WebhookDelivery.Status.CANCELED, leased_until=None
        )
    log.info("webhook endpoint %s deleted; %d pending deliveries canceled", endpoint_id, canceled)
    return endpoint


def _locked_endpoint(endpoint_id: str) -> WebhookEndpoint:
    """The endpoint, row-locked, unless it is (or meanwhile was) deleted."""
    endpoint = webhook_endpoints().select_for_update().filter(pk=endpoint_id).first()
    if endpoint is None:
        raise errors.ResourceMissing(f"No such webhook endpoint: '{endpoint_id}'")
    return endpoint


def resend_delivery(delivery_id: int) -> WebhookDelivery:
    """Put a delivery back in the queue, due now, whatever its status (delivered, failed
    after the retry window, or pending): the next worker sends it again. A failed one past
    the retry window gets this one attempt; its endpoint must not be deleted."""
    with transaction.atomic(durable=True):
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",))
            .select_related("endpoint")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:
            raise errors.ResourceMissing(f"No such webhook delivery: '{delivery_id}'")
        if delivery.endpoint.deleted_at is not None:
            raise DeliveryNotResendable()
        delivery.status = WebhookDelivery.Status.PENDING
        delivery.next_attempt_at = timezone.now()
        delivery.leased_until = None
        delivery.save(update_fields=["status", "next_attempt_at", "leased_until"])
    return delivery
