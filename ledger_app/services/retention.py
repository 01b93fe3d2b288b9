"""Forgetting old idempotency keys, never one whose outcome is still open."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger_app.models import IdempotencyRecord, ProviderMovement

FINAL = ProviderMovement.FINAL_STATUSES


def purgeable_keys(*, older_than_days: int):
    """Keys older than that whose refund or charge is final. A key whose refund is pending
    or unknown is kept: a retry with it must still replay, not refund again."""
    if older_than_days < 1:
        raise ValueError("older_than_days must be at least 1")
    cutoff = timezone.now() - timedelta(days=older_than_days)
    return IdempotencyRecord.objects.filter(created_at__lt=cutoff).filter(
        Q(refund__status__in=FINAL) | Q(charge__status__in=FINAL)
    )


def purge_idempotency_keys(*, older_than_days: int, batch_size: int = 5000) -> int:
    """Delete them in batches, each in its own short transaction; the number deleted.
    After this a request with a purged key is a new request (documented retention)."""
    deleted = 0
    while True:
        with transaction.atomic(durable=True):
            ids = list(
                purgeable_keys(older_than_days=older_than_days).values_list("pk", flat=True)[
                    :batch_size
                ]
            )
            if not ids:
                return deleted
            deleted += IdempotencyRecord.objects.filter(pk__in=ids).delete()[0]
