"""Named row locks. Order: idempotency key first, then charges in primary-key order."""

from __future__ import annotations

from django.db import OperationalError
from django.db.models import QuerySet

from ledger_app.models import Charge


def charges_for_update() -> QuerySet[Charge]:
    return Charge.objects.order_by("pk").select_for_update(of=("self",))


def is_lock_timeout(exc: OperationalError) -> bool:
    """PostgreSQL gave up waiting for a row lock (lock_timeout, SQLSTATE 55P03)."""
    return getattr(exc.__cause__, "sqlstate", None) == "55P03"
