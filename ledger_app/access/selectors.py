"""Reads of API keys: the live key behind a request's prefix."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)

from ledger_app import compiled
from ledger_app.access.models import ApiKey


def active_api_key(prefix: str) -> ApiKey | None:
    """The key with this prefix, unless it was revoked (every API request reads it: the
    query is compiled once, `compiled`)."""
    found = compiled.run(_active_api_key, prefix)
    return found[0] if found else None


def _active_api_key() -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(prefix=compiled.KEY, revoked_at__isnull=True).order_by("pk")[:1]
