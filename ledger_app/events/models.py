"""Events (what changed, as Stripe's event objects), webhook endpoints and their
deliveries."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from ledger_app import api_versions
from ledger_app.charges.models import Charge
from ledger_app.encryption import EncryptedSecretField
from ledger_app.ids import new_id
from ledger_app.refunds.models import Refund


def new_event_id() -> str:
    return new_id("evt_")


def new_endpoint_id() -> str:
    return new_id("we_")


class EventType(models.TextChoices):
    """Stripe's names for what happened to a charge, a refund or a charge's dispute."""

    CHARGE_SUCCEEDED = "charge.succeeded", "Charge succeeded"
    CHARGE_FAILED = "charge.failed", "Charge failed"
    CHARGE_REFUNDED = "charge.refunded", "Charge refunded"
    CHARGE_UPDATED = "charge.updated", "Charge updated"
    REFUND_CREATED = "refund.created", "Refund created"
    REFUND_UPDATED = "refund.updated", "Refund updated"
    REFUND_FAILED = "refund.failed", "Refund failed"
    DISPUTE_CREATED = "charge.dispute.created", "Dispute created"
    DISPUTE_UPDATED = "charge.dispute.updated", "Dispute updated"
    DISPUTE_CLOSED = "charge.dispute.closed", "Dispute closed"
    DISPUTE_FUNDS_WITHDRAWN = "charge.dispute.funds_withdrawn", "Dispute funds withdrawn"
    DISPUTE_FUNDS_REINSTATED = "charge.dispute.funds_reinstated", "Dispute funds reinstated"


class Event(models.Model):
    """The outbox: one row per state change of a charge or refund, appended in the same
    transaction as the change (no event without its change, no change without its event),
    shaped as Stripe's event. `data_object` is the object as it was right after the
    change; `previous_attributes` the fields the change moved, as they were before."""

    Type = EventType

    id = models.CharField(primary_key=True, max_length=64, default=new_event_id, editable=False)
    type = models.CharField(max_length=64, choices=EventType)
    data_object = models.JSONField()
    previous_attributes = models.JSONField(null=True, blank=True)
    request_id = models.CharField(
        max_length=64, blank=True, help_text="The API request that caused it, if one did."
    )
    request_idempotency_key = models.CharField(max_length=255, blank=True)
    charge = models.ForeignKey(
        Charge, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["type", "-created_at"], name="event_type_created")]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class WebhookEndpoint(models.Model):
    """Where client systems want events sent. The secret signs every delivery; the API
    shows it once, when the endpoint is created."""

    class Status(models.TextChoices):
        ENABLED = "enabled", "Enabled"
        DISABLED = "disabled", "Disabled"

    id = models.CharField(primary_key=True, max_length=64, default=new_endpoint_id, editable=False)
    url = models.CharField(max_length=2048)
    enabled_events = models.JSONField(default=list, help_text='Event types, or ["*"] for all.')
    api_version = models.CharField(
        max_length=32,
        default=api_versions.account_default,
        help_text="The Stripe API version its events are rendered in.",
    )
    description = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status, default=Status.ENABLED)
    # Encrypted at rest (ledger_app/encryption.py, docs/operating/secrets.md).
    secret = EncryptedSecretField(editable=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="Deleted endpoints receive nothing more."
    )
    api_key = models.ForeignKey(
        "ApiKey",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.SET_NULL,
        related_name="webhook_endpoints",
        help_text="The API key that made it (none: the back office itself); it counts "
        "against that key's WEBHOOK_ENDPOINTS_PER_KEY.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return f"{self.id} {self.url}"

    def wants(self, event_type: str) -> bool:
        """Whether it is sent an event recorded as `event_type`: under the name its API
        version gives that event (api_versions.told_as; some are not sent to older ones)."""
        told = api_versions.told_as(self.api_version, event_type)
        if told is None:
            return False
        return "*" in self.enabled_events or told in self.enabled_events


class WebhookDelivery(models.Model):
    """One event on its way to one endpoint, delivered at least once: claimed with a lease
    like a refund, retried with backoff on errors, non-2xx answers and timeouts, and given
    up on (`failed`) when it is older than the retry window."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"  # after the retry window
        CANCELED = "canceled", "Canceled"  # the endpoint was deleted before it was delivered

    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.PROTECT, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    leased_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The receiver's last HTTP status."
    )
    last_error = models.TextField(blank=True, help_text="The last failure, in a line.")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "endpoint"], name="delivery_once_per_endpoint"
            ),
        ]
        permissions = [("resend_webhookdelivery", "Can resend webhook deliveries")]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}"
