"""Load charges exported from a provider; safe to run again on the same file."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.charges.import_files import Format
from ledger_app.charges.imports import ImportRowResult, ImportSummary, Outcome, run_import
from ledger_app.counts import count_of
from ledger_app.csv_files import UnusableFile
from ledger_app.management.commands._output import Progress


class Command(BaseCommand):
    help = (
        "Import charges from FILE.csv. Default layout (--format native): columns id, amount "
        "(minor units: 1234 for $12.34), currency, status (succeeded, failed, pending, "
        "unknown), and optional description, created (unix seconds or ISO 8601) and "
        "amount_refunded (minor units the provider already refunded). --format stripe reads "
        "Stripe's dashboard payments export (id, Amount, Amount Refunded, Currency, Status "
        "required; amounts in major units; Customer ID, Description, Created date (UTC) and "
        "'key (metadata)' columns used). Other columns are ignored and named in the summary. "
        "A refund the provider already made comes in as a succeeded refund that is never "
        "sent. A charge already here with what the file says is left as it is; one the file "
        "says otherwise about is refused (import_conflict). Exit 0, 1 if rows were refused, "
        "2 if the file is unusable (an amount with a decimal point in a minor-units column "
        "makes it so; nothing is written)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--format",
            dest="fmt",
            choices=[f.value for f in Format],
            default=Format.NATIVE.value,
            help="native (default: amounts in minor units) or stripe (Stripe's payments export).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Check every row and say what would be imported; write nothing.",
        )

    def handle(self, *args: Any, file: Path, fmt: str, dry_run: bool, **options: Any) -> None:
        if not file.is_file():
            raise CommandError(f"unusable file: {file} does not exist", returncode=2)
        progress = Progress()

        def on_row(result: ImportRowResult) -> None:
            progress.step()
            if result.outcome == Outcome.REFUSED:
                self.stderr.write(f"line {result.line}: refused, {result.code}: {result.message}")
            elif result.outcome == Outcome.SKIPPED:
                self.stderr.write(
                    f"line {result.line}: skipped, Stripe status {result.message!r}: "
                    "no charge was made"
                )

        try:
            summary = run_import(
                file,
                fmt=Format(fmt),
                dry_run=dry_run,
                on_start=progress.set_total,
                on_row=on_row,
            )
        except UnusableFile as exc:
            raise CommandError(f"unusable file: {exc}; nothing was written", returncode=2) from None
        finally:
            progress.close()
        self.stdout.write(summary_line(summary, dry_run=dry_run))
        if summary.refused:
            were = "was" if summary.refused == 1 else "were"
            raise CommandError(f"{count_of(summary.refused, 'row')} {were} refused", returncode=1)


def summary_line(summary: ImportSummary, *, dry_run: bool) -> str:
    """The last line on stdout: rows by outcome (a dry run says what it would do), refusals
    by code, and the columns the file had that were not used."""
    counts = summary.outcomes
    parts = []
    new = counts[Outcome.WOULD_IMPORT if dry_run else Outcome.IMPORTED]
    if new:
        refunded = (
            f" ({summary.with_refund} with a refund made at the provider)"
            if summary.with_refund
            else ""
        )
        charges = count_of(new, "charge")
        parts.append((f"would import {charges}" if dry_run else f"{charges} imported") + refunded)
    existing = counts[Outcome.WOULD_EXIST if dry_run else Outcome.EXISTS]
    if existing:
        parts.append(
            f"would skip {count_of(existing, 'existing charge')}"
            if dry_run
            else f"{count_of(existing, 'charge')} {'exists' if existing == 1 else 'exist'}"
        )
    if counts[Outcome.SKIPPED]:
        statuses = ", ".join(sorted(summary.skipped_statuses))
        parts.append(
            f"{'would skip' if dry_run else 'skipped'} {count_of(counts[Outcome.SKIPPED], 'row')} "
            f"with no charge (Stripe status {statuses})"
        )
    if summary.refused:
        codes = summary.refused_by_code
        by_code = (
            next(iter(codes))
            if len(codes) == 1
            else ", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
        )
        parts.append(f"{count_of(summary.refused, 'row')} refused ({by_code})")
    prefix = "import_charges (dry run, nothing written)" if dry_run else "import_charges"
    line = f"{prefix}: {count_of(summary.rows, 'row')}: {', '.join(parts)}"
    if summary.ignored_columns:
        line += f"; ignored columns: {', '.join(summary.ignored_columns)}"
    return line
