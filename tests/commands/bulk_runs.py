"""Running bulk_refund from tests: a CSV file written, the command called, its report read."""

import csv
import io

from django.core.management import CommandError, call_command

from ledger_app.models import IdempotencyRecord, LedgerEntry, Refund


def write_csv(path, rows, header=("charge", "amount", "reason", "note")):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def bulk(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("bulk_refund", *map(str, args), stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


def report_rows(path):
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def counts():
    return Refund.objects.count(), LedgerEntry.objects.count(), IdempotencyRecord.objects.count()
