"""The worker: every pending refund whose lease is free goes through the guarded send."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from django.db import DatabaseError
from django.utils import timezone

from ledger_app.charges.models import ProviderMovement
from ledger_app.provider.dispatch.send import Gateway, send_refund
from ledger_app.provider.selectors import next_to_send
from ledger_app.refunds.models import Refund
from ledger_app.worker_parts import ItemInHand, RunOutcomes

log = logging.getLogger("ledger_app.dispatch")


def still_leased_refunds(pks: Iterable[str]) -> int:
    """How many of these refunds are open and under a lease that has not run out: a send
    that could not finish (no answer from a lookup, a database error) leaves its lease
    to run out, and the next sender looks the refund up first."""
    return Refund.objects.filter(
        pk__in=list(pks),
        status__in=ProviderMovement.OPEN_STATUSES,
        leased_until__gt=timezone.now(),
    ).count()


def process_pending_refunds(
    *,
    batch_size: int = 100,
    lease_seconds: int | None = None,
    gateway: Gateway | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_refund: Callable[[Refund], None] = lambda refund: None,
    hand: ItemInHand | None = None,
) -> RunOutcomes:
    """Send every pending refund whose lease is free, oldest first, through send_refund.

    Any number of workers may run side by side: each refund's lease is taken by one
    conditional UPDATE, so a refund another worker holds is skipped, not waited for.
    Each run walks the queue once (keyset order), so a refund left to a lease that has
    not run out is not retried in a tight loop. `should_stop` is asked before each refund:
    nothing is claimed ahead of the send (the lease is taken by the send itself), so a
    stop leaves every refund not yet started pending with no lease, claimable at once.
    """
    tally = RunOutcomes()
    after: tuple[datetime, str] | None = None
    while not should_stop():
        try:
            batch = next_to_send(after, batch_size)
        except DatabaseError:
            tally.survive_database_error("reading the queue")
            break
        if not batch:
            break
        after = batch[-1]
        pks = (pk for _, pk in batch if not should_stop())
        tally.send_each(
            pks,
            lambda pk: send_refund(pk, gateway=gateway, lease_seconds=lease_seconds),
            on_refund,
            "refund",
            hand,
        )
    return tally
