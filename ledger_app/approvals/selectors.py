"""Reads of refund limits: those set on an API key."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)

from ledger_app.approvals.models import RefundLimit
from ledger_app.compiled import precompiled


def api_key_limits(prefix: str) -> list[RefundLimit]:
    """The refund limits set on the API key with this prefix (every refund an API key makes
    reads them: precompiled)."""
    return _api_key_limits(prefix)


@precompiled
def _api_key_limits(prefix: str) -> QuerySet[RefundLimit]:
    return RefundLimit.objects.filter(api_key__prefix=prefix)
