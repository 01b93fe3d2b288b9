"""How a command stops when asked (SIGTERM, SIGINT): `stop_requests` for a batch that
finishes the row in hand, `StopRequest` for a polling worker, with a bound on the wait."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType

from ledger_app.counts import count_of
from ledger_app.worker_parts import ItemInHand, ItemsInHand


@contextmanager
def stop_requests(say: Callable[[str], None], noun: str) -> Iterator[list[int]]:
    """SIGTERM and SIGINT append to the yielded list instead of ending the process, so
    the item in hand is finished and recorded; the old handlers come back after."""
    stopping: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        say(f"{signal.Signals(signum).name}: finishing the current {noun}")
        stopping.append(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# A worker asked to stop finishes the item in hand within this many seconds (--stop-seconds,
# or the WORKER_STOP_SECONDS setting if the project defines one): below the 30 s an
# orchestrator usually waits between SIGTERM and SIGKILL, and above one provider call
# (GATEWAY_TIMEOUT_SECONDS) or one webhook request (WEBHOOK_TIMEOUT_SECONDS), 10 s each.
STOP_SECONDS = 25.0
# A second signal this soon after the first is the same request: Ctrl-C reaches every
# process of the terminal's group and `make worker` forwards SIGTERM as well.
SAME_REQUEST_SECONDS = 1.0


class StopRequest:
    """SIGTERM or SIGINT while a worker runs: it takes no new item, finishes the one in
    hand (`hand`) and says so in one line. If that takes longer than `bound` seconds, or
    a second signal comes, it exits at once with 128 + the signal's number, the item in
    hand left under its lease (`left`: what happens to it then); that is the same as a
    crash, which the lease makes safe. True once requested."""

    def __init__(
        self,
        say: Callable[[str], None],
        nouns: tuple[str, str],
        hand: ItemInHand,
        bound: float,
        left: str,
    ) -> None:
        self.say, self.nouns, self.hand, self.bound, self.left = say, nouns, hand, bound, left
        self.signum: int | None = None
        self.at = 0.0
        self.held_pk: str | int | None = None  # in hand when the stop was requested
        self.held_at_stop = 0  # how many were in hand then (one per lane sending)
        self.finished_before = 0
        self._timer: threading.Timer | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    @contextmanager
    def handling(self) -> Iterator[StopRequest]:
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._signalled) for sig in signals}
        try:
            yield self
        finally:
            if self._timer is not None:
                self._timer.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            self.held_pk, self.finished_before = self.hand.pk, self.hand.finished
            self.held_at_stop = self.held()
            if self.held_pk is None:
                self.say(f"stopping: {name}, nothing in hand")
            else:
                held = self.count(self.held_at_stop)
                self.say(f"stopping: {name}, finishing {held} in hand (at most {self.bound:g} s)")
            self._timer = threading.Timer(
                self.bound, self._exit_now, args=("stop bound passed", signum)
            )
            self._timer.daemon = True
            self._timer.start()
        elif time.monotonic() - self.at >= SAME_REQUEST_SECONDS:
            self._exit_now(f"{name} again", signum)

    def _exit_now(self, why: str, signum: int) -> None:
        """Exit without finishing: from the timer's thread or a signal handler, so no
        cleanup that could wait on the main thread (a lock, the database)."""
        if self.hand.pk is None:
            line = f"stopped now: {why}; nothing in hand\n"
        else:
            held = self.count(self.held())
            line = f"stopped now: {why}; {held} left in hand, leased: {self.left}\n"
        os.write(sys.stderr.fileno(), line.encode())
        with suppress(Exception):
            sys.stdout.flush()
        os._exit(128 + signum)

    def held(self) -> int:
        """How many items are in hand now: the hand's own count where several lanes share
        it (worker_parts.ItemsInHand), else the one it names, if any."""
        if isinstance(self.hand, ItemsInHand):
            return max(self.hand.held, 0 if self.hand.pk is None else 1)
        return 0 if self.hand.pk is None else 1

    def count(self, n: int) -> str:
        return count_of(n, *self.nouns)

    def finished(self) -> int:
        """Items finished since the stop was requested (the one in hand, if any)."""
        return self.hand.finished - self.finished_before
