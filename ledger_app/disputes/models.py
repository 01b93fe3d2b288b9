"""A dispute of a charge as the provider last told of it."""

from __future__ import annotations

from django.db import models

from ledger_app.charges.models import Charge


class Dispute(models.Model):
    """The cardholder's bank asks a charge's money back (a charge has at most one). Its
    `balance_transactions` are the provider's (withdrawal, reinstatement) as it told of
    them; their money is in the ledger as dispute_* entries."""

    id = models.CharField(primary_key=True, max_length=255, help_text="The provider's id (dp_...).")
    charge = models.OneToOneField(Charge, on_delete=models.PROTECT, related_name="dispute")
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=32)
    reason = models.CharField(max_length=64, blank=True)
    is_charge_refundable = models.BooleanField(default=False)
    balance_transactions = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(help_text="When the provider opened it.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.id} {self.status}"
