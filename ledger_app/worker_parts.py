"""What the two polling workers share (process_refunds with the reconciler, and
deliver_webhooks): the outcomes of a run, and the item in hand while one is sent (the
items in hand, when several lanes send at once)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db import DatabaseError, connection

log = logging.getLogger("ledger_app.dispatch")


class Sent(Protocol):
    """What a send answers: whether it acted, and the item as it now is."""

    @property
    def acted(self) -> bool: ...

    @property
    def item(self) -> Any: ...


@dataclass
class RunOutcomes:
    """How many ended in each status, and the items that could not be finished."""

    statuses: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    handed_back: int = 0  # claimed, not started, and freed again at once (a stop request)
    left_leased: int = 0  # claimed, not started, and left to their lease (a database error)

    def add(self, status: str) -> None:
        self.statuses[status] += 1

    def add_up(self, part: RunOutcomes) -> None:
        """Count what another lane of the same run did, too."""
        self.statuses.update(part.statuses)
        self.errors += part.errors
        self.handed_back += part.handed_back
        self.left_leased += part.left_leased

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
        on_item: Callable[[Any], None],
        what: str,
        hand: ItemInHand | None = None,
    ) -> None:
        """send(pk) for each; a database error costs only that one; what another sender
        holds or what is already settled is not counted."""
        hand = hand or ItemInHand()
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
class ItemInHand:
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


@dataclass
class ItemsInHand(ItemInHand):
    """A worker's hand while several lanes send at once: `pk` names one of the deliveries
    in hand, `held` counts them all (what a stop request waits for)."""

    held: int = 0


class SharedHand:
    """The worker's ItemInHand, held by several lanes at once: it names one of the
    deliveries in hand (None when no lane holds one), counts every one finished and, in
    an ItemsInHand, how many are in hand."""

    def __init__(self, hand: ItemInHand) -> None:
        self.hand = hand
        self._held: list[str | int] = []
        self._lock = threading.Lock()

    @contextmanager
    def holding(self, pk: str | int) -> Iterator[None]:
        with self._lock:
            self._held.append(pk)
            self.hand.pk = pk
            self._count()
        try:
            yield
        except BaseException:
            with self._lock:  # as ItemInHand: one whose send raised stays in hand, leased
                self._held.remove(pk)
                self._count()
            raise
        with self._lock:
            self._held.remove(pk)
            self.hand.pk = self._held[-1] if self._held else None
            self.hand.finished += 1
            self._count()

    def _count(self) -> None:
        if isinstance(self.hand, ItemsInHand):
            self.hand.held = len(self._held)
