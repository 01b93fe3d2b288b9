"""The append-only ledger: one entry for every moment money is reserved, moved or
released."""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund


class LedgerEntryQuerySet(models.QuerySet["LedgerEntry"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never updated.")

    def delete(self) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never deleted.")


class LedgerEntry(models.Model):
    """Append-only history: one row per money-moving moment, written with the state change.

    `refunded_delta` is the change the moment made to the charge's amount_refunded, so
    summing it per charge must give amount_refunded back (verify_ledger checks this).
    On PostgreSQL a trigger refuses UPDATE and DELETE on this table.
    """

    class Kind(models.TextChoices):
        CHARGE_SUCCEEDED = "charge_succeeded", "Charge succeeded"
        REFUND_RESERVED = "refund_reserved", "Refund reserved"
        REFUND_SUCCEEDED = "refund_succeeded", "Refund succeeded"
        REFUND_RELEASED = "refund_released", "Refund released"
        # A dispute's money at the provider (ledger_app/disputes): moves no amount_refunded.
        DISPUTE_WITHDRAWN = "dispute_withdrawn", "Dispute funds withdrawn"
        DISPUTE_FEE = "dispute_fee", "Dispute fee"
        DISPUTE_REINSTATED = "dispute_reinstated", "Dispute funds reinstated"

    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="ledger_entries")
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    kind = models.CharField(max_length=32, choices=Kind)
    amount = models.BigIntegerField(help_text="Minor units moved at this moment.")
    refunded_delta = models.BigIntegerField(help_text="Change to the charge's amount_refunded.")
    currency = models.CharField(max_length=3)
    actor = models.CharField(max_length=200, blank=True)
    memo = models.TextField(blank=True)
    balance_transaction = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The provider's balance transaction that moved it (a dispute's), if one did.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "ledger entries"
        permissions = [("export_ledgerentry", "Can export ledger entries as CSV")]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="ledger_amount_positive"),
            # Each kind moves amount_refunded in exactly one way.
            models.CheckConstraint(
                condition=(
                    Q(kind="refund_reserved", refunded_delta=F("amount"), refund__isnull=False)
                    | Q(kind="refund_released", refunded_delta=-F("amount"), refund__isnull=False)
                    | Q(kind="refund_succeeded", refunded_delta=0, refund__isnull=False)
                    | Q(kind="charge_succeeded", refunded_delta=0, refund__isnull=True)
                    | Q(
                        kind__in=["dispute_withdrawn", "dispute_fee", "dispute_reinstated"],
                        refunded_delta=0,
                        refund__isnull=True,
                    )
                ),
                name="ledger_delta_matches_kind",
            ),
            # A provider's balance transaction is booked once of each kind it moves.
            models.UniqueConstraint(
                fields=["balance_transaction", "kind"],
                condition=~Q(balance_transaction=""),
                name="ledger_balance_transaction_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount} {self.currency} on {self.charge_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # An integrity guard, not business logic: an existing entry is never rewritten.
        if not self._state.adding:
            raise TypeError("Ledger entries are append-only; they are never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never deleted.")
