"""Idempotency records: one per (owner, key), bound to the refund or charge it made."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund


class IdempotencyOperation(models.TextChoices):
    REFUND_CREATE = "refund.create", "Create a refund"
    CHARGE_CREATE = "charge.create", "Create a charge"


# The owner of every key the back office itself uses (admin forms, commands, bulk files,
# demo data): one owner, so a file re-run by another operator replays. An API key owns
# its own keys under its label, `api_key:<prefix>` (services/idempotency.py owner_of).
BACK_OFFICE_KEYS = "backoffice"


# Charge keys made by some API key before keys had owners, when migration 0029 could not
# tell which: any API key's retry with the same key still replays them
# (services/idempotency.py find_legacy_replay), so no retry charges twice.
LEGACY_CLIENT_KEYS = "legacy"


class IdempotencyRecord(models.Model):
    """One row per idempotency key and owner, shared by every interface: keys belong to
    their owner (an API key, or the back office), as Stripe scopes them to an account."""

    Operation = IdempotencyOperation
    BACK_OFFICE = BACK_OFFICE_KEYS
    LEGACY_CLIENT = LEGACY_CLIENT_KEYS

    owner = models.CharField(
        max_length=64,
        default=BACK_OFFICE_KEYS,
        help_text="Whose key it is: api_key:<prefix> for an API client, backoffice for the "
        "back office's own (admin forms, commands), legacy for a charge key some API key "
        "made before keys had owners.",
    )
    key = models.CharField(max_length=255)
    operation = models.CharField(max_length=32, choices=Operation)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the request as sent.")
    request_params = models.JSONField(help_text="The request as sent, omitted fields as null.")
    refund = models.ForeignKey(
        Refund,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="idempotency_records",
    )
    charge = models.ForeignKey(
        Charge,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="idempotency_records",
        help_text="The charge a charge.create request made.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Each owner's keys are its own: another client's key is another request.
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_owner_key_unique"),
            # A record is bound to exactly what its request made, from its first insert.
            models.CheckConstraint(
                condition=(
                    Q(
                        operation=IdempotencyOperation.REFUND_CREATE,
                        refund__isnull=False,
                        charge__isnull=True,
                    )
                    | Q(
                        operation=IdempotencyOperation.CHARGE_CREATE,
                        charge__isnull=False,
                        refund__isnull=True,
                    )
                ),
                name="idempotency_record_bound",
            ),
        ]

    def __str__(self) -> str:
        return self.key
