"""Forgetting old idempotency keys, never one whose outcome is still open."""

from __future__ import annotations

from django.db import transaction

from ledger_app.models import IdempotencyRecord
from ledger_app.selectors import purgeable_keys


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
