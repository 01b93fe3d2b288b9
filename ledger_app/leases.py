"""Which refunds or charges a sender holds (a lease), and which wait or are in doubt:
the conditions the dispatch worker, the reconciler and the support queue share."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import (
    Q,
)
from django.utils import timezone

from ledger_app.charges.models import MovementStatus


def lease_free(now: datetime) -> Q:
    """Refunds or charges no sender holds: never leased, or the lease ran out."""
    return Q(leased_until__isnull=True) | Q(leased_until__lte=now)


def waiting_to_send(now: datetime) -> Q:
    """Pending refunds or charges no sender holds: what the worker sends next."""
    return Q(status=MovementStatus.PENDING) & lease_free(now)


def stale_pending(now: datetime | None = None, lease_seconds: int | None = None) -> Q:
    """Pending refunds or charges nobody is sending: a lease that ran out, or none taken
    within a lease's length of being created (a process died between commit and send)."""
    now = now or timezone.now()
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    stale = now - timedelta(seconds=lease_seconds)
    return Q(status=MovementStatus.PENDING) & (
        Q(leased_until__lte=now) | Q(leased_until__isnull=True, created_at__lte=stale)
    )


def in_doubt(now: datetime | None = None, lease_seconds: int | None = None) -> Q:
    """Refunds or charges the reconciler asks the provider about: unknown, or pending with
    no sender."""
    return Q(status=MovementStatus.UNKNOWN) | stale_pending(now, lease_seconds)
