"""Refund the rows of a CSV file; safe to interrupt and re-run with the same batch id."""

from __future__ import annotations

import csv
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ledger_app.errors import IdempotencyKeyReused
from ledger_app.management.commands._output import Progress, cli_actor
from ledger_app.money import format_money
from ledger_app.services.bulk import BulkSummary, RowResult, UnusableFile, run_bulk_refund

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
]


class Command(BaseCommand):
    help = (
        "Refund every row of FILE.csv (columns: charge, amount in minor units or blank for "
        "all that is left, reason, note, optional idempotency_key). Each row's key is its "
        "idempotency_key or bulk:<batch id>:<row number>, so running the same file again "
        "with the same --batch-id refunds nothing twice. Exit 0 if no row was refused, 1 if "
        "some were, 2 if the file is unusable (then nothing was written)."
    )

    def add_arguments(self, parser):
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

    def handle(
        self, *args, file: Path, batch_id: str, dry_run: bool, report: Path | None, **options
    ):
        if not file.is_file():
            raise CommandError(f"unusable file: {file} does not exist", returncode=2)
        summary = self.run_batch(file, batch_id=batch_id, dry_run=dry_run, report=report)
        self.stdout.write(summary_line(summary, dry_run=dry_run))
        if summary.refused:
            raise CommandError(f"{summary.refused} rows were refused", returncode=1)

    def run_batch(
        self, file: Path, *, batch_id: str, dry_run: bool, report: Path | None
    ) -> BulkSummary:
        """Refund the file's rows, telling of each as it ends; an unusable file is exit 2."""
        progress = Progress()
        report_file = report.open("w", newline="", encoding="utf-8") if report else None
        writer = csv.writer(report_file) if report_file else None
        if writer:
            writer.writerow(REPORT_COLUMNS)

        def on_row(result: RowResult) -> None:
            progress.step()
            self.warn_if_key_reused(result)
            if writer:
                writer.writerow(report_line(result))

        try:
            return run_bulk_refund(
                file,
                batch_id=batch_id,
                actor=cli_actor(),
                dry_run=dry_run,
                on_start=progress.set_total,
                on_row=on_row,
            )
        except UnusableFile as exc:
            raise CommandError(f"unusable file: {exc}; nothing was written", returncode=2) from None
        finally:
            progress.close()
            if report_file:
                report_file.close()

    def warn_if_key_reused(self, result: RowResult) -> None:
        if result.code == IdempotencyKeyReused.code:
            self.stderr.write(
                f"row {result.row.number}: REFUSED, key {result.key} was used for a "
                "different request. The row changed since this batch ran; give the "
                "changed file a new --batch-id if it really is a new refund."
            )


def report_line(result: RowResult) -> list:
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
    ]


def summary_line(summary: BulkSummary, *, dry_run: bool) -> str:
    """The last line on stdout: rows by outcome, refusals by code, amounts by currency."""
    outcomes = ", ".join(f"{n} {name}" for name, n in sorted(summary.outcomes.items()))
    codes = ", ".join(f"{code} {n}" for code, n in sorted(summary.refused_by_code.items()))
    totals = ", ".join(
        f"{currency} {format_money(amount, currency)}"
        for currency, amount in sorted(summary.totals.items())
    )
    prefix = "bulk_refund (dry run)" if dry_run else "bulk_refund"
    return (
        f"{prefix}: {summary.rows} rows: {outcomes}"
        + (f"; refused by code: {codes}" if codes else "")
        + (f"; refunded: {totals}" if totals else "")
    )
