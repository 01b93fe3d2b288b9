"""The worker: every pending refund whose lease is free goes through the guarded send."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, connection
from django.utils import timezone

from ledger_app.models import ProviderMovement, Refund
from ledger_app.selectors import next_to_send
from ledger_app.services.dispatch.send import Gateway, Sent, send_refund

log = logging.getLogger("ledger_app.dispatch")


@dataclass
class Tally:
    """How many ended in each status, and the items that could not be finished."""

    statuses: Counter = field(default_factory=Counter)
    errors: int = 0
    handed_back: int = 0  # claimed, not started, and freed again at once (a stop request)
    left_leased: int = 0  # claimed, not started, and left to their lease (a database error)

    def add(self, status: str) -> None:
        self.statuses[status] += 1

    def summary(self) -> str:
        parts = [f"{n} {s}" for s, n in sorted(self.statuses.items())]
        if self.errors:
            parts.append(f"{self.errors} interrupted by database errors (retried later)")
        return ", ".join(parts) or "nothing to do"

    def survive_database_error(self, what: str) -> None:
        """The database went away mid-item. The item stays leased until its lease runs out
        and is then sent again (looked up first) with the same key; drop the broken
        connection and go on."""
        log.exception("%s interrupted by a database error; it will be retried", what)
        self.errors += 1
        connection.close()

    def send_each(
        self,
        pks: Iterable[str],
        send: Callable[[str], Sent],
        on_item: Callable,
        what: str,
        hand: Hand | None = None,
    ) -> None:
        """send(pk) for each; a database error costs only that one; what another sender
        holds or what is already settled is not counted."""
        hand = hand or Hand()
        for pk in pks:
            try:
                with hand.holding(pk):
                    sent = send(pk)
            except DatabaseError:
                self.survive_database_error(f"{what} {pk}")
                continue
            if sent.acted:
                self.add(sent.item.status)
                on_item(sent.item)


@dataclass
class Hand:
    """The item a worker is sending at this moment (it sends one at a time), so that a
    stop request can say what it waits for and, once stopped, what it finished. An item
    whose send raised stays `pk`: it is still leased."""

    pk: str | int | None = None
    finished: int = 0

    @contextmanager
    def holding(self, pk: str | int) -> Iterator[None]:
        self.pk = pk
        yield
        self.pk = None
        self.finished += 1


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
    hand: Hand | None = None,
) -> Tally:
    """Send every pending refund whose lease is free, oldest first, through send_refund.

    Any number of workers may run side by side: each refund's lease is taken by one
    conditional UPDATE, so a refund another worker holds is skipped, not waited for.
    Each run walks the queue once (keyset order), so a refund left to a lease that has
    not run out is not retried in a tight loop. `should_stop` is asked before each refund:
    nothing is claimed ahead of the send (the lease is taken by the send itself), so a
    stop leaves every refund not yet started pending with no lease, claimable at once.
    """
    tally = Tally()
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
