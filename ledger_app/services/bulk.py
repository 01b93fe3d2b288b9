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
from dataclasses import dataclass, field
from pathlib import Path

from ledger_app.errors import IdempotencyKeyReused, LedgerError
from ledger_app.models import Refund
from ledger_app.services.refunds import create_refund, preview_refund
from ledger_app.services.text import has_control_characters

COLUMNS = {"charge", "amount", "reason", "note", "idempotency_key"}
REQUIRED_COLUMNS = {"charge"}
DIGITS = re.compile(r"^[0-9]{1,19}\Z")  # \Z, not $: "5\n" is not a number of minor units


class UnusableFile(Exception):
    """The file cannot be processed at all; nothing was written."""


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
    outcome: str  # refunded, replayed, refused, failed, unknown, pending (+ would_* in dry runs)
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
        if result.outcome in {"refunded", "pending", "unknown", "would_refund"}:
            self.totals[result.currency] += result.amount or 0

    @property
    def refused(self) -> int:
        return self.outcomes["refused"] + self.outcomes["failed"]


def read_rows(path: Path) -> Iterator[BulkRow]:
    """Stream the file's rows, raising UnusableFile for what makes the whole file unusable:
    not UTF-8, no header or missing or unknown columns, an amount that is not a whole
    number of minor units (a sign that the file is in the wrong unit)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
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
            for number, values in enumerate(reader, start=1):
                if not any(v.strip() for v in values):
                    continue  # blank line
                if len(values) != len(columns):
                    raise UnusableFile(
                        f"line {reader.line_num}: {len(values)} fields, the header has "
                        f"{len(columns)}"
                    )
                row = dict(zip(columns, (v.strip() for v in values), strict=True))
                amount = row.get("amount", "")
                if amount and not DIGITS.match(amount):
                    raise UnusableFile(
                        f"line {reader.line_num}: amount {amount[:30]!r} is not a whole number "
                        "of minor units (cents; 1234 for $12.34)"
                    )
                yield BulkRow(
                    number=number,
                    charge=row["charge"],
                    amount=int(amount) if amount else None,
                    reason=row.get("reason", ""),
                    note=row.get("note", ""),
                    idempotency_key=row.get("idempotency_key", ""),
                )
    except UnicodeDecodeError as exc:
        raise UnusableFile(f"the file is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise UnusableFile(f"the file is not valid CSV: {exc}") from None


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
    summary = BulkSummary()
    reserved: dict[str, int] = defaultdict(int)  # dry run: what earlier rows would take
    keys_seen: dict[str, tuple] = {}  # dry run: what each key was first used for
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
            if dry_run:
                sent = (row.charge, row.amount, row.reason, row.note)
                if key in keys_seen:  # as the real run would: replay, or refuse a reuse
                    if keys_seen[key] != sent:
                        raise IdempotencyKeyReused()
                    result = RowResult(row, key, "would_replay")
                    summary.add(result)
                    on_row(result)
                    continue
                keys_seen[key] = sent
                preview = preview_refund(**request, also_reserved=reserved[row.charge])
                if preview.replay_of is None:
                    reserved[row.charge] += preview.amount
                result = RowResult(
                    row,
                    key,
                    "would_replay" if preview.replay_of else "would_refund",
                    refund_id=preview.replay_of.id if preview.replay_of else "",
                    amount=preview.amount,
                    currency=preview.charge.currency,
                )
            else:
                created = create_refund(**request)
                refund = created.item
                outcome = (
                    "replayed"
                    if created.replayed
                    else {
                        Refund.Status.SUCCEEDED: "refunded",
                        Refund.Status.FAILED: "failed",
                    }.get(refund.status, refund.status)
                )
                result = RowResult(
                    row,
                    key,
                    outcome,
                    refund_id=refund.id,
                    amount=refund.amount,
                    currency=refund.currency,
                    status=refund.status,
                    code=refund.status_detail if outcome == "failed" else "",
                )
        except LedgerError as exc:
            result = RowResult(row, key, "refused", code=exc.code, message=exc.message)
        summary.add(result)
        on_row(result)
    return summary
