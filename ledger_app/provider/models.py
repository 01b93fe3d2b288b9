"""What the provider told us: each webhook event received, once."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ProviderEvent(models.Model):
    """An event the payment provider sent to /webhooks/stripe, stored once by its id: a
    repeat is acknowledged and changes nothing."""

    id = models.CharField(primary_key=True, max_length=255)
    type = models.CharField(max_length=100)
    payload = models.JSONField()
    outcome = models.TextField(blank=True, help_text="What the ledger did with it.")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"
