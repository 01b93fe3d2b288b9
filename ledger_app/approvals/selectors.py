"""Reads of refund limits: those set on an API key."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)

from ledger_app import compiled
from ledger_app.approvals.models import RefundLimit


def api_key_limits(prefix: str) -> list[RefundLimit]:
    """The refund limits set on the API key with this prefix (every refund an API key makes
    reads them: compiled once)."""
    return compiled.run(_api_key_limits, prefix)


def _api_key_limits() -> QuerySet[RefundLimit]:
    return RefundLimit.objects.filter(api_key__prefix=compiled.KEY)
