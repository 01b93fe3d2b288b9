"""What the commands share in what they say: who is acting, progress on a terminal, and exit
codes that say how refunds ended."""

from __future__ import annotations

import getpass
import sys
import time
from typing import TextIO

from django.core.management.base import BaseCommand

from ledger_app.refunds.models import Refund


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


class Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, total: int | None = None, stream: TextIO | None = None) -> None:
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

    def run_from_argv(self, argv: list[str]) -> None:
        super().run_from_argv(argv)  # a CommandError exits on its own (1)
        if self.exit_code:
            sys.exit(self.exit_code)

    def report_unsettled(self, status: str, what: str) -> None:
        code, message = UNSETTLED[status]
        self.exit_code = max(self.exit_code, code)
        self.stderr.write(message.format(what=what))
