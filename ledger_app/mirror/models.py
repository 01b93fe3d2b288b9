"""What the mirror keeps of its own: how far sync_provider has walked the provider."""

from __future__ import annotations

from django.db import models


class ProviderSyncCursor(models.Model):
    """For one kind of the provider's objects (charge, refund, dispute, balance
    transaction, payout): every object made
    before `synced_until` has been applied. The next run starts one
    PROVIDER_SYNC_INTERVAL before it, so an object the provider listed late is not missed."""

    kind = models.CharField(primary_key=True, max_length=32)
    synced_until = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.kind} until {self.synced_until:%Y-%m-%d %H:%M:%S}"
