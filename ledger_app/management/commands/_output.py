"""Shared bits of the commands' output: who is acting, progress on a terminal, and exit
codes that say how refunds ended."""

from __future__ import annotations

import getpass
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.core.management.base import BaseCommand

from ledger_app.models import Refund
from ledger_app.services.dispatch import Tally


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
UNSETTLED = {
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


class PollingWorker(BaseCommand):
    """A worker command: one pass over what is due (`--once`, the default) or passes
    until SIGTERM/SIGINT (`--loop`), finishing the item in hand before it stops."""

    noun = "item"  # what one item is called in help and stop messages
    batch_default = 100
    poll_default = 2.0
    lease_help = "How long a claim holds."

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

    def run_passes(self, options, one_pass: Callable[..., Tally], **arguments) -> Tally:
        """One pass (`one_pass(batch_size=, lease_seconds=, should_stop=, **arguments)`),
        or passes until stopped with --loop; the summed tally."""
        total = Tally()
        with stop_requests(self.stderr.write, self.noun) as stopping:
            while True:
                tally = one_pass(
                    batch_size=options["batch_size"],
                    lease_seconds=options["lease_seconds"],
                    should_stop=lambda: bool(stopping),
                    **arguments,
                )
                total.statuses.update(tally.statuses)
                total.errors += tally.errors
                if not options["loop"] or stopping:
                    return total
                deadline = time.monotonic() + options["poll_seconds"]
                while not stopping and time.monotonic() < deadline:
                    time.sleep(0.05)
