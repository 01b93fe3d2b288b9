"""Bulk refunds from a CSV file: safe to interrupt, re-run, and run twice at once.

Every row gets an idempotency key: its own `idempotency_key` column, or
`bulk:<batch id>:<row number>`. Running the same file again under the same batch id
replays the rows already done and does the rest; an edited row under the same batch id
is refused as a key reuse. The file is read twice, streaming, never held in memory: once
to make sure it is usable at all (nothing is written if it is not), once to refund.
"""

from __future__ import annotations

import csv
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from ledger_app.errors import IdempotencyKeyReused, LedgerError
from ledger_app.models import Refund
from ledger_app.services.refunds import create_refund, preview_refund
from ledger_app.services.text import has_control_characters

COLUMNS = {"charge", "amount", "reason", "note", "idempotency_key"}
REQUIRED_COLUMNS = {"charge"}
DIGITS = re.compile(r"^[0-9]{1,19}\Z")  # \Z, not $: "5\n" is not a number of minor units


class UnusableFile(Exception):
    """The file cannot be processed at all; nothing was written."""


class RowOutcome(StrEnum):
    """How a row ended: the word in the summary line and the report's outcome column."""

    # A real run
    REFUNDED = "refunded"  # the provider made the refund
    PENDING = "pending"  # written, not sent yet: process_refunds sends it (worker mode)
    UNKNOWN = "unknown"  # sent, no answer: the amount stays reserved until reconcile
    FAILED = "failed"  # the provider declined; nothing was refunded
    REPLAYED = "replayed"  # the row's key had already made its refund; nothing written
    REFUSED = "refused"  # create_refund (or its checks, in a dry run) refused the row
    # A dry run
    WOULD_REFUND = "would_refund"
    WOULD_REPLAY = "would_replay"


OUTCOME_BY_STATUS = {
    Refund.Status.SUCCEEDED: RowOutcome.REFUNDED,
    Refund.Status.PENDING: RowOutcome.PENDING,
    Refund.Status.UNKNOWN: RowOutcome.UNKNOWN,
    Refund.Status.FAILED: RowOutcome.FAILED,
}
# Rows whose amount is (or, in a dry run, would be) taken from the charge.
RESERVING = {RowOutcome.REFUNDED, RowOutcome.PENDING, RowOutcome.UNKNOWN, RowOutcome.WOULD_REFUND}


@dataclass(frozen=True)
class BulkRow:
    number: int  # 1 for the first row after the header
    charge: str
    amount: int | None
    reason: str
    note: str
    idempotency_key: str


@dataclass(frozen=True)
class RowResult:
    row: BulkRow
    key: str
    outcome: RowOutcome
    refund_id: str = ""
    amount: int | None = None
    currency: str = ""
    status: str = ""
    code: str = ""
    message: str = ""


@dataclass
class BulkSummary:
    rows: int = 0
    outcomes: Counter = field(default_factory=Counter)
    refused_by_code: Counter = field(default_factory=Counter)
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, result: RowResult) -> None:
        self.rows += 1
        self.outcomes[result.outcome] += 1
        if result.code:
            self.refused_by_code[result.code] += 1
        if result.outcome in RESERVING:
            self.totals[result.currency] += result.amount or 0

    @property
    def refused(self) -> int:
        return self.outcomes[RowOutcome.REFUSED] + self.outcomes[RowOutcome.FAILED]


@contextmanager
def open_csv(path: Path) -> Iterator[TextIO]:
    """Open a CSV file to read. While it is read, a file that is not UTF-8 or not valid
    CSV raises UnusableFile."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            yield handle
    except UnicodeDecodeError as exc:
        raise UnusableFile(f"the file is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise UnusableFile(f"the file is not valid CSV: {exc}") from None


def read_rows(path: Path) -> Iterator[BulkRow]:
    """Stream the file's rows, raising UnusableFile for what makes the whole file unusable:
    not UTF-8, no header or missing or unknown columns, an amount that is not a whole
    number of minor units (a sign that the file is in the wrong unit)."""
    with open_csv(path) as handle:
        reader = csv.reader(handle)
        columns = _columns(next(reader, None))
        for number, values in enumerate(reader, start=1):
            if not any(v.strip() for v in values):
                continue  # blank line
            yield _bulk_row(number, columns, values, line=reader.line_num)


def _columns(header: list[str] | None) -> list[str]:
    """The header's column names, each known and named once, charge among them."""
    if header is None:
        raise UnusableFile("the file is empty")
    columns = [name.strip().lower() for name in header]
    missing = REQUIRED_COLUMNS - set(columns)
    unknown = set(columns) - COLUMNS
    if missing or unknown or len(set(columns)) != len(columns):
        raise UnusableFile(
            f"the header must name the columns {sorted(COLUMNS)} (charge required, "
            f"each once); missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    return columns


def _bulk_row(number: int, columns: list[str], values: list[str], *, line: int) -> BulkRow:
    """One row of values under the header's columns; `line` is where it ends in the file."""
    if len(values) != len(columns):
        raise UnusableFile(f"line {line}: {len(values)} fields, the header has {len(columns)}")
    row = dict(zip(columns, (v.strip() for v in values), strict=True))
    amount = row.get("amount", "")
    if amount and not DIGITS.match(amount):
        raise UnusableFile(
            f"line {line}: amount {amount[:30]!r} is not a whole number "
            "of minor units (cents; 1234 for $12.34)"
        )
    return BulkRow(
        number=number,
        charge=row["charge"],
        amount=int(amount) if amount else None,
        reason=row.get("reason", ""),
        note=row.get("note", ""),
        idempotency_key=row.get("idempotency_key", ""),
    )


def check_file(path: Path) -> int:
    """Read the whole file once without writing; the number of rows, or UnusableFile."""
    count = sum(1 for _ in read_rows(path))
    if count == 0:
        raise UnusableFile("the file has a header but no rows")
    return count


def run_bulk_refund(
    path: Path,
    *,
    batch_id: str,
    actor: str,
    dry_run: bool = False,
    on_start: Callable[[int], None] = lambda rows: None,
    on_row: Callable[[RowResult], None] = lambda result: None,
) -> BulkSummary:
    """Refund every row of the file through create_refund (or, in a dry run, through the
    same checks without writing). Raises UnusableFile, having written nothing, when the
    file is unusable; refusals of single rows are reported, not raised."""
    if not batch_id.strip() or len(batch_id) > 200 or has_control_characters(batch_id):
        raise UnusableFile("the batch id must be 1 to 200 characters, no control characters")
    on_start(check_file(path))
    do_row = DryRun().check_row if dry_run else refund_row
    summary = BulkSummary()
    for row in read_rows(path):
        key = row.idempotency_key or f"bulk:{batch_id}:{row.number}"
        request = {
            "charge_id": row.charge,
            "amount": row.amount,
            "idempotency_key": key,
            "reason": row.reason,
            "note": row.note,
            "actor": actor,
            "source": Refund.Source.BULK,
        }
        try:
            result = do_row(row, key, request)
        except LedgerError as exc:
            result = RowResult(row, key, RowOutcome.REFUSED, code=exc.code, message=exc.message)
        summary.add(result)
        on_row(result)
    return summary


def refund_row(row: BulkRow, key: str, request: dict[str, Any]) -> RowResult:
    """The real run's step: refund one row through create_refund; raises the LedgerError
    that refuses it."""
    created = create_refund(**request)
    refund = created.item
    outcome = RowOutcome.REPLAYED if created.replayed else OUTCOME_BY_STATUS[refund.status]
    return RowResult(
        row,
        key,
        outcome,
        refund_id=refund.id,
        amount=refund.amount,
        currency=refund.currency,
        status=refund.status,
        code=refund.status_detail if outcome == RowOutcome.FAILED else "",
    )


class DryRun:
    """The dry run's step: one row at a time, what refund_row would do, without writing.
    create_refund's checks (preview_refund) see only the database, so this remembers what
    the earlier rows of the run would have done there."""

    def __init__(self) -> None:
        self.reserved: dict[str, int] = defaultdict(int)  # what earlier rows would take
        self.keys_seen: dict[str, tuple] = {}  # what each key was first used for

    def check_row(self, row: BulkRow, key: str, request: dict[str, Any]) -> RowResult:
        """The row's would_* result; raises the LedgerError the real run would refuse with."""
        sent = (row.charge, row.amount, row.reason, row.note)
        if key in self.keys_seen:  # as the real run would: replay, or refuse a reuse
            if self.keys_seen[key] != sent:
                raise IdempotencyKeyReused()
            return RowResult(row, key, RowOutcome.WOULD_REPLAY)
        self.keys_seen[key] = sent
        preview = preview_refund(**request, also_reserved=self.reserved[row.charge])
        if preview.replay_of is None:
            self.reserved[row.charge] += preview.amount
        return RowResult(
            row,
            key,
            RowOutcome.WOULD_REPLAY if preview.replay_of else RowOutcome.WOULD_REFUND,
            refund_id=preview.replay_of.id if preview.replay_of else "",
            amount=preview.amount,
            currency=preview.charge.currency,
        )
