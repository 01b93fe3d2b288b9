"""Bulk refunds from a CSV file: safe to interrupt, re-run, and run twice at once.

Every row gets an idempotency key: its own `idempotency_key` column, or
`bulk:<batch id>:<row number>`. Running the same file again under the same batch id
replays the rows already done and does the rest; an edited row under the same batch id
is refused as a key reuse. The file is read twice, streaming, never held in memory: once
to make sure it is usable at all (nothing is written if it is not), once to refund.

With `jobs` > 1 the rows are refunded by that many forked processes (bulk_jobs.py), still
one create_refund per row, every row ending as it would with one job and reported in file
order. Stopped (`should_stop`), each job finishes the row in hand and takes no other; the
rows done are reported and the summary says how many.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from ledger_app.approvals import limits
from ledger_app.csv_files import UnusableFile, minor_units_or_unusable, open_csv
from ledger_app.errors import IdempotencyKeyReused, LedgerError, RepeatOfEarlier
from ledger_app.idempotency.services import BULK_ROW_KEYS
from ledger_app.refunds.bulk_jobs import JobPool
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import (
    RefundRequest,
    actor_label,
    create_refund,
    preview_refund,
)
from ledger_app.text import has_control_characters

COLUMNS = {"charge", "amount", "reason", "note", "idempotency_key"}
REQUIRED_COLUMNS = {"charge"}
MAX_JOBS = 32
# A row refunding a charge the same amount as a live refund made this recently by another
# batch or person is refused (repeat_of_earlier), unless the run allows repeats.
DEFAULT_REPEAT_WINDOW = timedelta(days=7)
# create_refund's request for one row (row_request makes it).
Request = RefundRequest


class RowOutcome(StrEnum):
    """How a row ended: the word in the summary line and the report's outcome column."""

    # A real run
    REFUNDED = "refunded"  # the provider made the refund
    PENDING = "pending"  # written, not sent yet: process_refunds sends it (worker mode)
    UNKNOWN = "unknown"  # sent, no answer: the amount stays reserved until reconcile
    FAILED = "failed"  # the provider declined; nothing was refunded
    # over the requester's limit (--requested-by): reserved, waiting for a lead's approval
    AWAITING_APPROVAL = "awaiting_approval"
    REPLAYED = "replayed"  # the row's key had already made its refund; nothing written
    REFUSED = "refused"  # create_refund (or its checks, in a dry run) refused the row
    # the charge was refunded this amount lately by another batch or person (both runs)
    REPEAT_OF_EARLIER = "repeat_of_earlier"
    # A dry run
    WOULD_REFUND = "would_refund"
    WOULD_AWAIT_APPROVAL = "would_await_approval"
    WOULD_REPLAY = "would_replay"


OUTCOME_BY_STATUS: dict[str, RowOutcome] = {
    Refund.Status.SUCCEEDED: RowOutcome.REFUNDED,
    Refund.Status.PENDING: RowOutcome.PENDING,
    Refund.Status.UNKNOWN: RowOutcome.UNKNOWN,
    Refund.Status.FAILED: RowOutcome.FAILED,
    Refund.Status.AWAITING_APPROVAL: RowOutcome.AWAITING_APPROVAL,
}
# Rows whose amount is (or, in a dry run, would be) taken from the charge.
RESERVING = {
    RowOutcome.REFUNDED,
    RowOutcome.PENDING,
    RowOutcome.UNKNOWN,
    RowOutcome.AWAITING_APPROVAL,
    RowOutcome.WOULD_REFUND,
    RowOutcome.WOULD_AWAIT_APPROVAL,
}
# Outcomes whose money the summary totals, each apart: refunded money is never added to
# money that is only reserved, in doubt or declined.
TOTALLED = (
    RowOutcome.REFUNDED,
    RowOutcome.PENDING,
    RowOutcome.AWAITING_APPROVAL,
    RowOutcome.UNKNOWN,
    RowOutcome.FAILED,
    RowOutcome.WOULD_REFUND,
    RowOutcome.WOULD_AWAIT_APPROVAL,
    RowOutcome.REPEAT_OF_EARLIER,
)
# Outcomes that make the run exit 1: nothing was refunded for these rows.
NOT_DONE = {RowOutcome.REFUSED, RowOutcome.FAILED, RowOutcome.REPEAT_OF_EARLIER}


@dataclass(frozen=True)
class BulkRow:
    number: int  # 1 for the first row after the header
    charge: str
    amount: int | None
    reason: str
    note: str
    idempotency_key: str


@dataclass(frozen=True)
class BulkRowResult:
    row: BulkRow
    key: str
    outcome: RowOutcome
    refund_id: str = ""
    amount: int | None = None
    currency: str = ""
    status: str = ""
    code: str = ""
    message: str = ""
    # repeat_of_earlier: the earlier refund, and the batch (or else who) that made it
    repeat_of: str = ""
    repeat_by: str = ""


@dataclass
class BulkSummary:
    rows: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    refused_by_code: Counter[str] = field(default_factory=Counter)
    # outcome -> currency -> minor units, for the TOTALLED outcomes
    totals: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    repeats_by: Counter[str] = field(default_factory=Counter)  # earlier batch (or person) -> rows
    stopped: bool = False  # should_stop said stop before every row was done (jobs > 1)

    def add(self, result: BulkRowResult) -> None:
        self.rows += 1
        self.outcomes[result.outcome] += 1
        if result.code:
            self.refused_by_code[result.code] += 1
        if result.outcome in TOTALLED and result.amount:
            self.totals[result.outcome][result.currency] += result.amount
        if result.outcome == RowOutcome.REPEAT_OF_EARLIER:
            self.repeats_by[result.repeat_by] += 1

    @property
    def refused(self) -> int:
        """Rows for which nothing was (or would be) refunded: refused, declined, repeats."""
        return sum(self.outcomes[outcome] for outcome in NOT_DONE)


def read_bulk_rows(path: Path) -> Iterator[BulkRow]:
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
    return BulkRow(
        number=number,
        charge=row["charge"],
        amount=minor_units_or_unusable(row.get("amount", ""), line=line),
        reason=row.get("reason", ""),
        note=row.get("note", ""),
        idempotency_key=row.get("idempotency_key", ""),
    )


def check_bulk_file(path: Path) -> int:
    """Read the whole file once without writing; the number of rows, or UnusableFile."""
    count = sum(1 for _ in read_bulk_rows(path))
    if count == 0:
        raise UnusableFile("the file has a header but no rows")
    return count


@dataclass(frozen=True)
class BulkRun:
    """One run of a bulk file: its batch id, the requester, and how it runs. `jobs` > 1
    (not with a dry run) spreads the rows over that many processes with the same
    outcomes. `repeat_window`: a row refunding a charge the same amount as a live refund
    made within it by another batch or person ends `repeat_of_earlier`, refunding nothing
    (checked by create_refund under the charge lock); None allows repeats
    (--allow-repeats)."""

    batch_id: str
    actor: AbstractBaseUser | str
    dry_run: bool = False
    jobs: int = 1
    repeat_window: timedelta | None = DEFAULT_REPEAT_WINDOW


def run_bulk_refund(
    path: Path,
    run: BulkRun,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    on_start: Callable[[int], None] = lambda rows: None,
    on_row: Callable[[BulkRowResult], None] = lambda result: None,
) -> BulkSummary:
    """Refund every row of the file through create_refund (or, in a dry run, through the
    same checks without writing). Raises UnusableFile, having written nothing, when the
    file is unusable; refusals of single rows are reported, not raised. Only with more
    than one job is `should_stop` asked, and a stopped run's summary says `stopped`."""
    _check_run(run)
    on_start(check_bulk_file(path))
    summary = BulkSummary()

    def report(result: BulkRowResult) -> None:
        summary.add(result)
        on_row(result)

    ask = partial(
        row_request, batch_id=run.batch_id, actor=run.actor, repeat_window=run.repeat_window
    )
    if run.jobs > 1:
        rows = (ask(row) for row in read_bulk_rows(path))
        pool = JobPool(run.jobs, partial(refund_or_refuse, refund_row))
        summary.stopped = pool.run(rows, should_stop=should_stop, on_row=report)
        return summary
    do_row = DryRun().check_row if run.dry_run else refund_row
    for row in read_bulk_rows(path):
        row, key, request = ask(row)
        report(refund_or_refuse(do_row, row, key, request))
    return summary


def _check_run(run: BulkRun) -> None:
    batch_id = run.batch_id
    if not batch_id.strip() or len(batch_id) > 200 or has_control_characters(batch_id):
        raise UnusableFile("the batch id must be 1 to 200 characters, no control characters")
    if not 1 <= run.jobs <= MAX_JOBS:
        raise ValueError(f"jobs must be 1 to {MAX_JOBS}")
    if run.dry_run and run.jobs > 1:
        raise ValueError("a dry run is one job: it counts what earlier rows would take")


def row_request(
    row: BulkRow,
    *,
    batch_id: str,
    actor: AbstractBaseUser | str,
    repeat_window: timedelta | None = None,
) -> tuple[BulkRow, str, Request]:
    """The row, its idempotency key and create_refund's arguments for it."""
    key = row.idempotency_key or f"{BULK_ROW_KEYS}:{batch_id}:{row.number}"
    request = RefundRequest(
        charge_id=row.charge,
        amount=row.amount,
        idempotency_key=key,
        reason=row.reason,
        note=row.note,
        actor=actor,
        source=Refund.Source.BULK,
        batch_id=batch_id,
        refuse_repeats_within=repeat_window,
    )
    return row, key, request


def refund_or_refuse(
    do_row: Callable[[BulkRow, str, Request], BulkRowResult],
    row: BulkRow,
    key: str,
    request: Request,
) -> BulkRowResult:
    """The row's result from `do_row`, or its refusal."""
    try:
        return do_row(row, key, request)
    except RepeatOfEarlier as exc:
        earlier = exc.earlier
        return BulkRowResult(
            row,
            key,
            RowOutcome.REPEAT_OF_EARLIER,
            amount=earlier.amount,
            currency=earlier.currency,
            code=exc.code,
            message=exc.message,
            repeat_of=earlier.pk,
            repeat_by=f"batch {earlier.batch_id}" if earlier.batch_id else earlier.actor,
        )
    except LedgerError as exc:
        return BulkRowResult(row, key, RowOutcome.REFUSED, code=exc.code, message=exc.message)


def refund_row(row: BulkRow, key: str, request: Request) -> BulkRowResult:
    """The real run's step: refund one row through create_refund; raises the LedgerError
    that refuses it."""
    created = create_refund(request)
    refund = created.item
    outcome = RowOutcome.REPLAYED if created.replayed else OUTCOME_BY_STATUS[refund.status]
    return BulkRowResult(
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
        self.keys_seen: dict[
            str, tuple[str, int | None, str, str]
        ] = {}  # what each key was first used for
        self.spent: dict[str, int] = defaultdict(int)  # what earlier rows add to today's total

    def check_row(self, row: BulkRow, key: str, request: Request) -> BulkRowResult:
        """The row's would_* result; raises the LedgerError the real run would refuse with."""
        sent = (row.charge, row.amount, row.reason, row.note)
        if key in self.keys_seen:  # as the real run would: replay, or refuse a reuse
            if self.keys_seen[key] != sent:
                raise IdempotencyKeyReused()
            return BulkRowResult(row, key, RowOutcome.WOULD_REPLAY)
        self.keys_seen[key] = sent
        preview = preview_refund(request, also_reserved=self.reserved[row.charge])
        outcome = RowOutcome.WOULD_REPLAY
        if preview.replay_of is None:
            self.reserved[row.charge] += preview.amount
            outcome = self.within_limits(request.actor, preview.amount, preview.charge.currency)
        return BulkRowResult(
            row,
            key,
            outcome,
            refund_id=preview.replay_of.id if preview.replay_of else "",
            amount=preview.amount,
            currency=preview.charge.currency,
        )

    def within_limits(
        self, actor: AbstractBaseUser | str | None, amount: int, currency: str
    ) -> RowOutcome:
        """would_refund, or would_await_approval over the requester's limits (counting what
        the run's earlier rows would add to today's total)."""
        user = None if isinstance(actor, str) else actor
        label = actor_label(actor)
        found = limits.limits_in_currency(user=user, actor_label=label, currency=currency)
        if not found.any:
            return RowOutcome.WOULD_REFUND
        now = timezone.now()
        spent = limits.spent_today(actor_label=label, currency=currency, now=now)
        if limits.needs_approval(found, amount=amount, spent=spent + self.spent[currency]):
            return RowOutcome.WOULD_AWAIT_APPROVAL
        self.spent[currency] += amount
        return RowOutcome.WOULD_REFUND
