"""Refund the rows of a CSV file; safe to interrupt and re-run with the same batch id."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from typing_extensions import override

from ledger_app.counts import count_of
from ledger_app.csv_files import UnusableFile, csv_writer
from ledger_app.errors import IdempotencyKeyReused
from ledger_app.management.commands._output import Progress, cli_actor
from ledger_app.management.commands._stopping import stop_requests
from ledger_app.money import format_money
from ledger_app.refunds.bulk import (
    DEFAULT_REPEAT_WINDOW,
    MAX_JOBS,
    BulkRowResult,
    BulkRun,
    BulkSummary,
    RowOutcome,
    run_bulk_refund,
)
from ledger_app.refunds.bulk_jobs import JobFailed

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

REPORT_COLUMNS = [
    "row",
    "charge",
    "amount_requested",
    "idempotency_key",
    "outcome",
    "refund",
    "amount",
    "currency",
    "status",
    "code",
    "message",
    "repeat_of",
    "repeat_by",
]
# What each money total in the summary is called, in the order it is told.
TOTAL_NAMES = {
    RowOutcome.REFUNDED: "refunded",
    RowOutcome.PENDING: "pending (reserved, not sent yet)",
    RowOutcome.AWAITING_APPROVAL: "awaiting approval (reserved, not refunded)",
    RowOutcome.UNKNOWN: "unknown (reserved, the provider has not answered)",
    RowOutcome.FAILED: "declined (not refunded)",
    RowOutcome.WOULD_REFUND: "would refund",
    RowOutcome.WOULD_AWAIT_APPROVAL: "would await approval (reserved, not refunded)",
    RowOutcome.REPEAT_OF_EARLIER: "repeats not refunded",
}


class Command(BaseCommand):
    help = (
        "Refund every row of FILE.csv (columns: charge, amount in minor units or blank for "
        "all that is left, reason, note, optional idempotency_key). Each row's key is its "
        "idempotency_key or bulk:<batch id>:<row number>, so running the same file again "
        "with the same --batch-id refunds nothing twice, whatever --jobs. Exit 0 if no row "
        "was refused, 1 if some were, 2 if the file is unusable (then nothing was written). "
        "A row refunding a charge the same amount as a live refund made within "
        "--repeat-window by another batch or person is refused as repeat_of_earlier (an old "
        "file run again under a new batch id) unless --allow-repeats."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--batch-id",
            required=True,
            help="Names this batch; re-runs of the file must use the same one.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Check every row, write nothing."
        )
        parser.add_argument("--report", type=Path, help="Write one line per row to this CSV.")
        add_repeat_options(parser)
        parser.add_argument(
            "--requested-by",
            metavar="USERNAME",
            help=(
                "Refund as this staff user: their refund limits apply, and rows over them "
                "wait, reserved, for another person's approval (outcome awaiting_approval). "
                "Without it the rows are the operator's (cli:<login>), which no limit holds."
            ),
        )
        add_jobs_option(parser)

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
        except Stopped as stopped:
            # End as one job ends on that signal (killed by it), the report written.
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(stopped.signum, signal.SIG_DFL)
            os.kill(os.getpid(), stopped.signum)

    @override  # Django calls it with each option of add_arguments as a keyword
    def handle(
        self,
        *args: Any,
        file: Path,
        batch_id: str,
        dry_run: bool,
        report: Path | None,
        jobs: int,
        requested_by: str | None = None,
        repeat_window: timedelta = DEFAULT_REPEAT_WINDOW,
        allow_repeats: bool = False,
        **options: Any,
    ) -> None:
        if not file.is_file():
            raise CommandError(f"unusable file: {file} does not exist", returncode=2)
        self.actor = cli_actor() if requested_by is None else requester(requested_by)
        jobs = self.usable_jobs(jobs, dry_run=dry_run)
        self.repeat_window = None if allow_repeats else repeat_window
        if jobs == 1:
            summary = self.run_batch(file, batch_id=batch_id, dry_run=dry_run, report=report)
        else:
            summary = self.run_jobs(file, batch_id=batch_id, report=report, jobs=jobs)
        self.stdout.write(summary_line(summary, dry_run=dry_run))
        if summary.repeats_by:
            self.stderr.write(repeats_warning(summary, dry_run=dry_run))
        if summary.refused:
            were = "was" if summary.refused == 1 else "were"
            raise CommandError(f"{count_of(summary.refused, 'row')} {were} refused", returncode=1)

    def run_jobs(self, file: Path, *, batch_id: str, report: Path | None, jobs: int) -> BulkSummary:
        """run_batch in several jobs at once until SIGINT or SIGTERM: then each job finishes
        its row in hand, the rows done are told and reported, and Stopped is raised."""
        with stop_requests(self.stderr.write, "row of each job") as stopping:
            summary = self.run_batch(
                file,
                batch_id=batch_id,
                dry_run=False,
                report=report,
                jobs=jobs,
                should_stop=lambda: bool(stopping),
            )
        if summary.stopped:
            name = signal.Signals(stopping[0]).name
            self.stderr.write(
                summary_line(summary, prefix=f"bulk_refund stopped by {name}")
                + f" (of {count_of(self.total_rows, 'row')}). Each job finished its row in "
                f"hand; run it again with --batch-id {batch_id} to do the rest (rows done "
                "replay)."
            )
            raise Stopped(stopping[0])
        return summary

    def usable_jobs(self, jobs: int, *, dry_run: bool) -> int:
        """--jobs, or 1 (and why, on stderr) where more than one job cannot help."""
        if jobs == 1:
            return 1
        if dry_run:
            why = "a dry run counts what the earlier rows of each charge would take, in order"
        elif connection.vendor != "postgresql":
            why = f"{connection.vendor} lets one writer at a time, so more jobs would only wait"
        elif connection.in_atomic_block:
            why = "inside a transaction, which other connections cannot see"
        else:
            return jobs
        self.stderr.write(f"--jobs {jobs}: running as one job: {why}.")
        return 1

    def run_batch(
        self,
        file: Path,
        *,
        batch_id: str,
        dry_run: bool,
        report: Path | None,
        jobs: int = 1,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> BulkSummary:
        """Refund the file's rows, telling of each as it ends; an unusable file is exit 2."""
        progress = Progress()
        self.total_rows = 0

        def on_start(rows: int) -> None:
            self.total_rows = rows
            progress.set_total(rows)

        report_file, write_line = open_report(report)

        def on_row(result: BulkRowResult) -> None:
            progress.step()
            self.warn_if_key_reused(result)
            if write_line:
                write_line(report_line(result))

        run = self.bulk_run(batch_id, dry_run=dry_run, jobs=jobs)
        try:
            with exit_codes(batch_id):
                return run_bulk_refund(
                    file, run, should_stop=should_stop, on_start=on_start, on_row=on_row
                )
        finally:
            progress.close()
            if report_file:
                report_file.close()

    def bulk_run(self, batch_id: str, *, dry_run: bool, jobs: int) -> BulkRun:
        """The run of the file: its batch id, requester, mode, jobs and repeat window."""
        return BulkRun(
            batch_id=batch_id,
            actor=self.actor,
            dry_run=dry_run,
            jobs=jobs,
            repeat_window=self.repeat_window,
        )

    def warn_if_key_reused(self, result: BulkRowResult) -> None:
        if result.code == IdempotencyKeyReused.code:
            self.stderr.write(
                f"row {result.row.number}: REFUSED, key {result.key} was used for a "
                "different request. The row changed since this batch ran; give the "
                "changed file a new --batch-id if it really is a new refund."
            )


class Stopped(Exception):
    """SIGINT or SIGTERM stopped a run of several jobs; the rows done are reported."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def add_repeat_options(parser: argparse.ArgumentParser) -> None:
    """--repeat-window and --allow-repeats: which rows are refused as repeats."""
    parser.add_argument(
        "--repeat-window",
        type=repeat_window,
        default=DEFAULT_REPEAT_WINDOW,
        metavar="TIME",
        help=(
            "A row whose charge was refunded the same amount within this long by another "
            "batch or person is refused as repeat_of_earlier, naming it (default 7d; "
            "days, or 36h, 7d)."
        ),
    )
    parser.add_argument(
        "--allow-repeats",
        action="store_true",
        help="Refund rows even when they repeat an earlier refund (no repeat check).",
    )


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    """--jobs: how many processes refund at once."""
    parser.add_argument(
        "--jobs",
        type=job_count,
        default=1,
        metavar="N",
        help=(
            f"Refund in N processes at once (1 to {MAX_JOBS}; default 1), each row still "
            "through create_refund. Every row of one charge goes to the same job, in "
            "file order, so every row ends as it would with --jobs 1; the report stays "
            "in row order. PostgreSQL only: on SQLite (one writer at a time) and with "
            "--dry-run (which counts what earlier rows would take) it runs as one job. "
            "SIGINT/SIGTERM: each job finishes its row in hand, the rows done are "
            "reported, and a re-run with the same --batch-id does the rest."
        ),
    )


def open_report(report: Path | None) -> tuple[TextIO | None, Callable[[list], object] | None]:
    """The --report file and what writes a line to it, the header written; (None, None)
    without one. Its cells are the file's own text too (charge ids, messages naming them):
    defused."""
    if report is None:
        return None, None
    report_file = report.open("w", newline="", encoding="utf-8")
    writer = csv_writer(report_file)
    writer.writerow(REPORT_COLUMNS)
    return report_file, writer.writerow


@contextmanager
def exit_codes(batch_id: str) -> Iterator[None]:
    """An unusable file as exit 2 (nothing was written) and a failed job as exit 1, each
    told what to do next."""
    try:
        yield
    except UnusableFile as exc:
        raise CommandError(f"unusable file: {exc}; nothing was written", returncode=2) from None
    except JobFailed as exc:
        raise CommandError(
            f"{exc}\nThe rows done are reported; once the cause is fixed, run it again "
            f"with --batch-id {batch_id} to do the rest (rows done replay).",
            returncode=1,
        ) from None


def job_count(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_JOBS}")
    return int(value)


def report_line(result: BulkRowResult) -> list:
    """The --report CSV's line for one row, in the order of REPORT_COLUMNS."""
    row = result.row
    return [
        row.number,
        row.charge,
        "" if row.amount is None else row.amount,
        result.key,
        result.outcome,
        result.refund_id,
        "" if result.amount is None else result.amount,
        result.currency,
        result.status,
        result.code,
        result.message,
        result.repeat_of,
        result.repeat_by,
    ]


def requester(username: str) -> AbstractBaseUser:
    """The active staff user `--requested-by` names, or exit 2."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None or not user.is_active or not user.is_staff:
        raise CommandError(
            f"--requested-by: no active staff user {username!r}; nothing was written",
            returncode=2,
        )
    return user


def repeat_window(value: str) -> timedelta:
    """--repeat-window: a whole number of days, or of hours or days with h or d (36h, 7d)."""
    found = re.fullmatch(r"([0-9]{1,5})([hd]?)", value.strip())
    if found is None or int(found[1]) == 0:
        raise argparse.ArgumentTypeError("must be a positive whole number of days, or 36h, 7d")
    number, unit = int(found[1]), found[2] or "d"
    return timedelta(hours=number) if unit == "h" else timedelta(days=number)


def repeats_warning(summary: BulkSummary, *, dry_run: bool) -> str:
    """What stderr says when rows repeat earlier refunds, and what to do about it."""
    return (
        f"{count_of(sum(summary.repeats_by.values()), 'row')} repeat earlier refunds "
        f"({repeats_told(summary)}) and {'would be' if dry_run else 'were'} not "
        "refunded: is this file running again under a new --batch-id? If these are "
        "new refunds, run it with --allow-repeats."
    )


def repeats_told(summary: BulkSummary) -> str:
    """Which earlier batches (or people) the repeats match, and how many rows each."""
    return ", ".join(f"of {by}: {n}" for by, n in sorted(summary.repeats_by.items()))


def summary_line(summary: BulkSummary, *, dry_run: bool = False, prefix: str = "") -> str:
    """The last line on stdout: rows by outcome, refusals by code, which earlier batches the
    repeats match, and each kind of money by currency apart: refunded, reserved (pending,
    awaiting approval, unknown), declined, not refunded as a repeat, or what a dry run
    would refund or reserve (it refunds nothing and says so)."""
    outcomes = ", ".join(f"{n} {name}" for name, n in sorted(summary.outcomes.items()))
    codes = ", ".join(f"{code} {n}" for code, n in sorted(summary.refused_by_code.items()))
    totals = "; ".join(
        f"{name}: "
        + ", ".join(
            f"{currency} {format_money(amount, currency)}"
            for currency, amount in sorted(summary.totals[outcome].items())
        )
        for outcome, name in TOTAL_NAMES.items()
        if summary.totals.get(outcome)
    )
    prefix = prefix or ("bulk_refund (dry run)" if dry_run else "bulk_refund")
    return (
        f"{prefix}: {count_of(summary.rows, 'row')}: {outcomes}"
        + (f"; refused by code: {codes}" if codes else "")
        + (f"; repeats {repeats_told(summary)}" if summary.repeats_by else "")
        + (f"; {totals}" if totals else "")
    )
