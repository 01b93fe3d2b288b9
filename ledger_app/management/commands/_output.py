"""Shared bits of the commands' output: who is acting, progress on a terminal, and exit
codes that say how refunds ended."""

from __future__ import annotations

import getpass
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import cast

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from ledger_app.models import Refund
from ledger_app.services.worker_parts import ItemInHand, RunOutcomes
from ledger_app.wording import count_of


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


class Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, total: int | None = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.shown = 0.0

    def set_total(self, total: int) -> None:
        self.total = total

    def step(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.enabled and now - self.shown >= 0.2:
            self.shown = now
            rate = self.done / max(now - self.started, 1e-9)
            of = f"/{self.total:,}" if self.total else ""
            rows = "row" if (self.total or self.done) == 1 else "rows"
            self.stream.write(f"\r{self.done:,}{of} {rows}  {rate:,.0f}/s ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


# Exit codes beyond Django's 0 (done) and 1 (CommandError): how a refund ended.
EXIT_FAILED = 3
EXIT_UNKNOWN = 4
UNSETTLED: dict[str, tuple[int, str]] = {
    Refund.Status.FAILED: (
        EXIT_FAILED,
        "failed: the provider declined {what}; nothing was refunded and the amount is "
        "released (listed under Refunds needing attention).",
    ),
    Refund.Status.UNKNOWN: (
        EXIT_UNKNOWN,
        "unknown: the provider did not say whether it made {what}; the amount stays "
        "reserved. Do not refund again: run `manage.py reconcile`, which asks the provider "
        "and settles it.",
    ),
}


class ExitsByOutcome(BaseCommand):
    """A command whose exit status says how its refunds ended. `report_unsettled` says on
    stderr what a failed or unknown ending means and raises the exit code (unknown, 4,
    outranks failed, 3); only a manage.py process exits with it, call_command returns."""

    exit_code = 0

    def run_from_argv(self, argv):
        super().run_from_argv(argv)  # a CommandError exits on its own (1)
        if self.exit_code:
            sys.exit(self.exit_code)

    def report_unsettled(self, status: str, what: str) -> None:
        code, message = UNSETTLED[status]
        self.exit_code = max(self.exit_code, code)
        self.stderr.write(message.format(what=what))


@contextmanager
def stop_requests(say: Callable[[str], None], noun: str) -> Iterator[list[int]]:
    """SIGTERM and SIGINT append to the yielded list instead of ending the process, so
    the item in hand is finished and recorded; the old handlers come back after."""
    stopping: list[int] = []

    def stop(signum, frame):
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

    def _signalled(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            self.held_pk, self.finished_before = self.hand.pk, self.hand.finished
            if self.held_pk is None:
                self.say(f"stopping: {name}, nothing in hand")
            else:
                held = self.count(1)
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
            line = f"stopped now: {why}; {self.count(1)} left in hand, leased: {self.left}\n"
        os.write(sys.stderr.fileno(), line.encode())
        with suppress(Exception):
            sys.stdout.flush()
        os._exit(128 + signum)

    def count(self, n: int) -> str:
        return count_of(n, *self.nouns)

    def finished(self) -> int:
        """Items finished since the stop was requested (the one in hand, if any)."""
        return self.hand.finished - self.finished_before


class PollingWorker(BaseCommand):
    """A worker command: one pass over what is due (`--once`, the default) or passes
    until SIGTERM/SIGINT (`--loop`), finishing the item in hand before it stops (see
    StopRequest; docs/operating/deploys.md)."""

    noun = "item"  # what one item is called in help and stop messages
    plural = "items"
    batch_default = 100
    poll_default = 2.0
    lease_help = "How long a claim holds."
    # What becomes of an item in hand if the worker exits without finishing it.
    left_in_hand = "it is taken up again when its lease runs out"

    def add_arguments(self, parser):
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--once", action="store_true", help="Send what is due now, then exit (default)."
        )
        mode.add_argument(
            "--loop", action="store_true", help="Keep polling until SIGTERM or SIGINT."
        )
        parser.add_argument(
            "--batch-size", type=int, default=self.batch_default, help="How many per claim."
        )
        parser.add_argument("--lease-seconds", type=int, default=None, help=self.lease_help)
        parser.add_argument(
            "--poll-seconds",
            type=float,
            default=self.poll_default,
            help="Pause between polls with --loop.",
        )
        parser.add_argument(
            "--stop-seconds",
            type=float,
            default=None,
            help=(
                f"On SIGTERM/SIGINT, how long the {self.noun} in hand may take to finish "
                f"before the worker exits anyway, leaving it leased (default {STOP_SECONDS:g})."
            ),
        )

    def still_leased(self, pk: str | int) -> bool:
        """Whether the item that was in hand at the stop is still under this worker's
        lease after its send returned (a refund whose lookup got no answer)."""
        return False

    def run_passes(self, options, one_pass: Callable[..., RunOutcomes], **arguments) -> RunOutcomes:
        """One pass (`one_pass(batch_size=, lease_seconds=, should_stop=, hand=,
        **arguments)`), or passes until stopped with --loop; the summed tally. Stopped by a
        signal, it says what it finished and what it left leased, on stderr."""
        bound = options.get("stop_seconds")
        if bound is None:
            bound = float(getattr(settings, "WORKER_STOP_SECONDS", STOP_SECONDS))
        if not 0 < bound <= 3600:
            raise CommandError("--stop-seconds must be more than 0 and at most 3600")
        hand = ItemInHand()
        total = RunOutcomes()
        nouns = (self.noun, self.plural)
        stop = StopRequest(self.stderr.write, nouns, hand, bound, self.left_in_hand)
        with stop.handling():
            while True:
                tally = one_pass(
                    batch_size=options["batch_size"],
                    lease_seconds=options["lease_seconds"],
                    should_stop=stop.__bool__,
                    hand=hand,
                    **arguments,
                )
                total.statuses.update(tally.statuses)
                total.errors += tally.errors
                total.handed_back += tally.handed_back
                total.left_leased += tally.left_leased
                if not options["loop"] or stop:
                    break
                deadline = time.monotonic() + options["poll_seconds"]
                while not stop and time.monotonic() < deadline:
                    time.sleep(0.05)
            if stop:
                self._say_stopped(stop, tally)
        return total

    def _say_stopped(self, stop: StopRequest, tally: RunOutcomes) -> None:
        left = tally.left_leased
        if stop.held_pk is not None and (stop.hand.pk == stop.held_pk or self._leased(stop)):
            left += 1
        parts = [f"{stop.count(stop.finished())} finished"]
        if tally.handed_back:
            parts.append(f"{tally.handed_back} claimed and handed back unsent")
        parts.append(f"{left} left leased")
        self.stderr.write("stopped: " + ", ".join(parts))

    def _leased(self, stop: StopRequest) -> bool:
        try:
            return self.still_leased(cast("str | int", stop.held_pk))  # only when held
        except DatabaseError:
            return True  # cannot tell; say the worse
