"""Reads for talking to the provider: the dispatch worker's queue and what the
reconciler asks about."""

from __future__ import annotations

from datetime import datetime

from django.db.models import (
    Q,
)
from django.utils import timezone

from ledger_app.charges.models import Charge
from ledger_app.leases import in_doubt, waiting_to_send
from ledger_app.refunds.models import Refund


def next_to_send(after: tuple[datetime, str] | None, size: int) -> list[tuple[datetime, str]]:
    """The worker's queue, one page at a time: (created_at, id) of the oldest pending
    refunds no sender holds, after the key `after` (keyset order, so one pass walks the
    queue once)."""
    queue = Refund.objects.filter(waiting_to_send(timezone.now()), Refund.sent_here())
    if after is not None:
        queue = queue.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1]))
    return list(queue.order_by("created_at", "id").values_list("created_at", "id")[:size])


def in_doubt_ids(model: type[Refund] | type[Charge], lease_seconds: int | None) -> list[str]:
    """Ids of the refunds or charges the reconciler asks about, oldest first. What was
    recorded here (imports, demo data) or made at the provider was never sent, so it is
    never in doubt: the provider's own word settles it (ledger_app/mirror)."""
    candidates = model.objects.filter(in_doubt(lease_seconds=lease_seconds), model.sent_here())
    return list(candidates.order_by("created_at", "id").values_list("pk", flat=True))
