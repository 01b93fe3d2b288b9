"""Reads of idempotency records: a key's record and what it made, and the keys old
enough to purge."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from django.db.models import (
    OuterRef,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import _charge
from ledger_app.compiled import precompiled
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import _refund


def idempotency_record(
    key: str, owner: str = IdempotencyRecord.BACK_OFFICE
) -> IdempotencyRecord | None:
    """The record for this key of this owner (an API key's label, or the back office's
    own keys by default), if any (every replay reads it: precompiled)."""
    found = _idempotency_record(key, owner)
    return found[0] if found else None


@precompiled
def _idempotency_record(key: str, owner: str) -> QuerySet[IdempotencyRecord]:
    return IdempotencyRecord.objects.filter(owner=owner, key=key).order_by()


def made_with(record: IdempotencyRecord) -> Refund | Charge:
    """The refund or charge a keyed request made, which its replay returns (precompiled,
    as the record is)."""
    if record.refund_id:
        found: list[Refund] | list[Charge] = _refund(record.refund_id)
    else:
        found = _charge(cast(str, record.charge_id))  # a record names one or the other
    if not found:  # pragma: no cover - a record's foreign key holds it
        raise Refund.DoesNotExist(f"idempotency key {record.key!r} has lost what it made")
    return found[0]


def purgeable_keys(
    *, older_than_days: int, now: datetime | None = None
) -> QuerySet[IdempotencyRecord]:
    """Keys older than that (before `now`, default the present) whose refund or charge is
    final. A key whose refund is pending, unknown or awaiting approval is kept: a retry
    with it must still replay, not refund again."""
    if older_than_days < 1:
        raise ValueError("older_than_days must be at least 1")
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    # What the key made (a record is bound to exactly one refund or one charge), read by
    # primary key for each key: purge_expired walks the keys by their created_at index in
    # batches, and a join or a hashed EXISTS would read every refund for each batch.
    made_status = Coalesce(
        Subquery(Refund.objects.filter(pk=OuterRef("refund_id")).order_by().values("status")),
        Subquery(Charge.objects.filter(pk=OuterRef("charge_id")).order_by().values("status")),
    )
    return (
        IdempotencyRecord.objects.filter(created_at__lt=cutoff)
        .alias(made_status=made_status)
        .filter(made_status__in=Refund.FINAL_STATUSES)
    )
