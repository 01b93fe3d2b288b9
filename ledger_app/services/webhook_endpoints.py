"""Webhook endpoints: the URLs client systems register (through the API or the admin) to
be sent the events they choose, each with its own signing secret. Which URLs may receive
is services/egress.py's to say; delivery is services/webhook_delivery.py's."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger_app import api_versions, errors
from ledger_app.errors import InvalidEnabledEvents, InvalidWebhookUrl
from ledger_app.models import EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.selectors import webhook_endpoints
from ledger_app.services import egress
from ledger_app.services.validation import merge_metadata, validate_metadata, validate_text
from ledger_app.stripe_event_types import STRIPE_EVENT_TYPES

log = logging.getLogger("ledger_app.webhooks")

ALL_EVENTS = "*"


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
) -> WebhookEndpoint:
    """A new enabled endpoint, with its signing secret (shown to the client only now).
    It receives the events recorded from now on, rendered in `api_version`: any published
    version, or the account default (DEFAULT_API_VERSION) when None, as Stripe's."""
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
    )
    endpoint.save(force_insert=True)
    log.info("webhook endpoint %s created for %s", endpoint.pk, endpoint.url)
    return endpoint


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
