"""The simulated provider's own books: what it applied, and every request it received.

These tables stand for the payment provider's side. The ledger never reads them; they
exist so tests and people can compare what the provider did with what the ledger says.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ProviderObject(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"  # accepted, not finished (pending_then_succeed)
        SUCCEEDED = "succeeded"
        DECLINED = "declined"  # refused when asked
        FAILED = "failed"  # succeeded, then failed later (succeed_then_fail)

    provider_id = models.CharField(max_length=64, unique=True)
    idempotency_key = models.CharField(max_length=255, unique=True)
    fingerprint = models.CharField(max_length=64)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status)
    decline_reason = models.CharField(max_length=100, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.provider_id


class ProviderCharge(ProviderObject):
    description = models.TextField(blank=True)


class ProviderRefund(ProviderObject):
    charge_reference = models.CharField(max_length=255, db_index=True)


class ProviderRequest(models.Model):
    """One row per request that reached the provider, whatever happened to it."""

    operation = models.CharField(max_length=32)
    idempotency_key = models.CharField(max_length=255, db_index=True)
    behaviour = models.CharField(max_length=32)
    outcome = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        # purge_expired takes the oldest first, batch by batch (SIMULATED_PROVIDER_LOG_DAYS)
        indexes = [models.Index(fields=["created_at"], name="provider_request_created")]

    def __str__(self) -> str:
        return f"{self.operation} {self.idempotency_key} -> {self.outcome}"


class ProviderDispute(models.Model):
    """A dispute of one of its charges (the cardholder's bank asks the money back): at most
    one per charge. Its funds are withdrawn when it opens past the inquiry stage
    (`warning_*` statuses take none) and reinstated when it is won."""

    provider_id = models.CharField(max_length=64, unique=True)
    charge_reference = models.CharField(max_length=255, unique=True)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.provider_id


class ProviderPayout(models.Model):
    """Money sent to the merchant's bank: every balance transaction of one currency that
    was available by its day (simulated_provider/books.py)."""

    provider_id = models.CharField(max_length=64, unique=True)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    arrival_date = models.DateField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.provider_id


class ProviderBalanceTransaction(models.Model):
    """One movement of the merchant's balance at the provider, in Stripe's terms: `amount`
    signed (a refund's is negative), `fee` what the provider kept, `net` = amount - fee,
    `source` the id of the charge, refund, dispute or payout that moved it."""

    provider_id = models.CharField(max_length=64, unique=True)
    type = models.CharField(max_length=32)
    reporting_category = models.CharField(max_length=32)
    source = models.CharField(max_length=255, blank=True, db_index=True)
    amount = models.BigIntegerField()
    fee = models.BigIntegerField(default=0)
    net = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    available_on = models.DateField()
    payout = models.ForeignKey(
        ProviderPayout, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.provider_id} {self.type} {self.amount} {self.currency}"
