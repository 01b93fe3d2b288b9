"""What the books keep: the provider's balance transactions and payouts as it listed them,
and each day's close (its figures and its differences)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund


class BalanceTransaction(models.Model):
    """One movement of the merchant's balance at the provider, as it listed it (Stripe's
    balance transaction): `amount` signed (a refund's is negative), `fee` what the provider
    kept, `net` = amount - fee, `source` the provider's id of the charge, refund, dispute or
    payout that moved it, `payout` the payout that paid it out, once one has."""

    id = models.CharField(primary_key=True, max_length=255)
    type = models.CharField(max_length=64)
    reporting_category = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=255, blank=True)
    amount = models.BigIntegerField()
    fee = models.BigIntegerField(default=0)
    net = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    description = models.CharField(max_length=1000, blank=True)
    status = models.CharField(max_length=16, blank=True)
    created = models.DateTimeField(help_text="When the provider made it.")
    available_on = models.DateTimeField(help_text="When the provider makes it available.")
    payout = models.CharField(max_length=255, blank=True, help_text="The payout (po_...) it is in.")
    fetched_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["source", "type"], name="balance_tx_source"),
            models.Index(fields=["created"], name="balance_tx_created"),
            models.Index(fields=["payout"], name="balance_tx_payout"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.type} {self.amount} {self.currency}"


class Payout(models.Model):
    """Money the provider sent to the merchant's bank (negative: took from it)."""

    id = models.CharField(primary_key=True, max_length=255)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    arrival_date = models.DateTimeField()
    created = models.DateTimeField()
    status = models.CharField(max_length=32, blank=True)
    automatic = models.BooleanField(default=True)
    method = models.CharField(max_length=32, blank=True)
    type = models.CharField(max_length=32, blank=True)
    description = models.CharField(max_length=1000, blank=True)
    balance_transaction = models.CharField(max_length=255, blank=True)
    fetched_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.id} {self.amount} {self.currency}"


class BooksDay(models.Model):
    """One day (UTC) and currency, as close_books last found it: the value refunded, the
    part of it matched to the provider's balance transactions and paid out (or explained),
    the differences by kind, and whether the day is closed."""

    class Status(models.TextChoices):
        CLOSED = "closed", "Closed"  # everything matched, or explained
        WAITING = "waiting", "Waiting for payouts"  # matched, not all paid out yet
        OPEN = "open", "Open"  # a difference nobody has explained

    day = models.DateField()
    currency = models.CharField(max_length=3)
    refunded = models.BigIntegerField(default=0, help_text="Value refunded that day.")
    matched = models.BigIntegerField(
        default=0, help_text="Of it: matched to the provider and paid out, or explained."
    )
    differences = models.JSONField(default=dict, help_text="Unexplained differences by kind.")
    status = models.CharField(max_length=16, choices=Status)
    closed_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField()

    class Meta:
        ordering = ["-day", "currency"]
        verbose_name = "day of the books"
        verbose_name_plural = "books against the provider"
        constraints = [
            models.UniqueConstraint(fields=["day", "currency"], name="books_day_currency_once")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.currency}: {self.status}"


class BooksDifference(models.Model):
    """Something the ledger and the provider do not agree on, on one day: a ledger movement
    with no balance transaction, a balance transaction with no ledger movement, the two
    for other amounts, or matched and not paid out yet. A lead may explain it."""

    class Kind(models.TextChoices):
        MISSING_AT_PROVIDER = "missing_at_provider", "Missing at the provider"
        MISSING_IN_LEDGER = "missing_in_ledger", "Missing in the ledger"
        AMOUNT_DIFFERS = "amount_differs", "Amount or currency differs"
        NOT_PAID_OUT = "not_paid_out", "Not paid out yet"

    day = models.DateField()
    currency = models.CharField(max_length=3)
    kind = models.CharField(max_length=32, choices=Kind)
    reference = models.CharField(
        max_length=300, help_text="What it is about: the ledger's movement, or the provider's."
    )
    charge = models.ForeignKey(
        Charge, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    balance_transaction = models.CharField(max_length=255, blank=True)
    ledger_amount = models.BigIntegerField(null=True, blank=True)
    provider_amount = models.BigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)
    still_there = models.BooleanField(
        default=True, help_text="False once a later close no longer finds it."
    )
    explanation = models.TextField(blank=True)
    explained_by = models.CharField(max_length=200, blank=True)
    explained_at = models.DateTimeField(null=True, blank=True)
    found_at = models.DateTimeField()

    class Meta:
        ordering = ["-day", "kind", "reference"]
        verbose_name = "difference with the provider"
        verbose_name_plural = "differences with the provider"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "kind", "reference"], name="books_difference_once"
            )
        ]
        indexes = [
            models.Index(
                fields=["day"], name="books_difference_open", condition=Q(explained_at=None)
            )
        ]
        permissions = [("explain_booksdifference", "Can explain a difference with the provider")]

    def __str__(self) -> str:
        return f"{self.day} {self.kind} {self.reference}"
