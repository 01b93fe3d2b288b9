"""Load charges exported from a provider; safe to run again on the same file."""

from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ledger_app.errors import LedgerError
from ledger_app.management.commands._output import Progress
from ledger_app.services.bulk import UnusableFile
from ledger_app.services.imports import import_charge, read_charge_rows


class Command(BaseCommand):
    help = (
        "Import charges from FILE.csv (columns id, amount in minor units, currency, status, "
        "description, created as unix seconds or ISO 8601). A charge already here with the "
        "same amount and currency is left as it is; one with another amount or currency is "
        "refused. Exit 0, 1 if rows were refused, 2 if the file is unusable (nothing written)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        if not file.is_file():
            raise CommandError(f"unusable file: {file} does not exist", returncode=2)
        try:
            rows = sum(1 for _ in read_charge_rows(file))
        except UnusableFile as exc:
            raise CommandError(f"unusable file: {exc}; nothing was written", returncode=2) from None
        if rows == 0:
            raise CommandError("unusable file: no rows; nothing was written", returncode=2)
        outcomes: Counter = Counter()
        progress = Progress(total=rows)
        for row in read_charge_rows(file):
            try:
                outcomes[import_charge(row.values)] += 1
            except LedgerError as exc:
                outcomes[f"refused ({exc.code})"] += 1
                self.stderr.write(f"line {row.line}: refused, {exc.code}: {exc.message}")
            progress.step()
        progress.close()
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
        self.stdout.write(f"import_charges: {rows} rows: {summary}")
        refused = sum(n for outcome, n in outcomes.items() if outcome.startswith("refused"))
        if refused:
            raise CommandError(f"{refused} rows were refused", returncode=1)
