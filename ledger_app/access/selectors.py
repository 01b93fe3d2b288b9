"""Reads of API keys: the live key behind a request's prefix."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)

from ledger_app.access.models import ApiKey
from ledger_app.compiled import precompiled


def active_api_key(prefix: str) -> ApiKey | None:
    """The key with this prefix, unless it was revoked (every API request reads it: the
    query is precompiled)."""
    found = _active_api_key(prefix)
    return found[0] if found else None


@precompiled
def _active_api_key(prefix: str) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).order_by("pk")[:1]
