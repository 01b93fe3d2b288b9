"""Bulk refunds from a CSV file: safe to interrupt, re-run, and run twice at once.

Every row gets an idempotency key: its own `idempotency_key` column, or
`bulk:<batch id>:<row number>`. Running the same file again under the same batch id
replays the rows already done and does the rest; an edited row under the same batch id
is refused as a key reuse. The file is read twice, streaming, never held in memory: once
to make sure it is usable at all (nothing is written if it is not), once to refund.

With `jobs` > 1 the rows are refunded by that many worker processes (forked, each with
its own database connection), still one create_refund per row. Every row of one charge
goes to the same job (crc32 of the charge id mod jobs) and a job takes its rows in file
order, so each charge sees its rows in file order; a row whose key is still in another
job's hands waits for it. So every row ends as it would with one job, and the rows are
reported in file order. At most READ_AHEAD rows are read and not yet reported, so memory
stays flat however long the file. Stopped (`should_stop`), each job finishes the row in
hand and takes no other; the rows done are reported and the summary says how many.
"""

from __future__ import annotations

import csv
import multiprocessing
import os
import re
import signal
import time
import traceback
import zlib
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields
from datetime import timedelta
from enum import StrEnum
from functools import partial
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, TextIO, cast

from django.db import connections
from django.utils import timezone

from ledger_app.errors import IdempotencyKeyReused, LedgerError, RepeatOfEarlier
from ledger_app.models import Refund
from ledger_app.services import limits
from ledger_app.services.dispatch.pool import in_flight
from ledger_app.services.idempotency import BULK_ROW_KEYS
from ledger_app.services.refunds import actor_label, create_refund, preview_refund
from ledger_app.services.text import has_control_characters

COLUMNS = {"charge", "amount", "reason", "note", "idempotency_key"}
REQUIRED_COLUMNS = {"charge"}
DIGITS = re.compile(r"^[0-9]{1,19}\Z")  # \Z, not $: "5\n" is not a number of minor units
MAX_JOBS = 32
JOB_QUEUE = 8  # rows sent to a job and not yet answered, the one in hand included
READ_AHEAD = 2_000  # rows read and not yet reported, at most: what memory holds
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
# A row refunding a charge the same amount as a live refund made this recently by another
# batch or person is refused (repeat_of_earlier), unless the run allows repeats.
DEFAULT_REPEAT_WINDOW = timedelta(days=7)


class UnusableFile(Exception):
    """The file cannot be processed at all; nothing was written."""


class JobFailed(Exception):
    """A job process met an error that is not a refusal (or died); the other jobs were
    stopped after their row in hand and the rows done were reported."""


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
    # repeat_of_earlier: the earlier refund, and the batch (or else who) that made it
    repeat_of: str = ""
    repeat_by: str = ""


@dataclass
class BulkSummary:
    rows: int = 0
    outcomes: Counter = field(default_factory=Counter)
    refused_by_code: Counter = field(default_factory=Counter)
    # outcome -> currency -> minor units, for the TOTALLED outcomes
    totals: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    repeats_by: Counter = field(default_factory=Counter)  # earlier batch (or person) -> rows
    stopped: bool = False  # should_stop said stop before every row was done (jobs > 1)

    def add(self, result: RowResult) -> None:
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
    return BulkRow(
        number=number,
        charge=row["charge"],
        amount=minor_units_or_unusable(row.get("amount", ""), line=line),
        reason=row.get("reason", ""),
        note=row.get("note", ""),
        idempotency_key=row.get("idempotency_key", ""),
    )


def minor_units_or_unusable(text: str, *, line: int, column: str = "amount") -> int | None:
    """A cell of a minor-units column: None when blank, else its int. Anything but ASCII
    digits (12.50, 1,234, -5, 1e3) is a sign that the whole file is in the wrong units, so
    it makes the file unusable rather than refusing one row (bulk_refund, import_charges)."""
    if not text:
        return None
    if not DIGITS.match(text):
        raise UnusableFile(
            f"line {line}: {column} {text[:30]!r} is not a whole number "
            "of minor units (cents; 1234 for $12.34)"
        )
    return int(text)


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
    jobs: int = 1,
    repeat_window: timedelta | None = DEFAULT_REPEAT_WINDOW,
    should_stop: Callable[[], bool] = lambda: False,
    on_start: Callable[[int], None] = lambda rows: None,
    on_row: Callable[[RowResult], None] = lambda result: None,
) -> BulkSummary:
    """Refund every row of the file through create_refund (or, in a dry run, through the
    same checks without writing). Raises UnusableFile, having written nothing, when the
    file is unusable; refusals of single rows are reported, not raised. `jobs` > 1 (not
    with a dry run) spreads the rows over that many processes with the same outcomes;
    only then is `should_stop` asked, and a stopped run's summary says `stopped`.
    `repeat_window`: a row refunding a charge the same amount as a live refund made within
    it by another batch or person ends `repeat_of_earlier`, refunding nothing (checked by
    create_refund under the charge lock); None allows repeats (--allow-repeats)."""
    if not batch_id.strip() or len(batch_id) > 200 or has_control_characters(batch_id):
        raise UnusableFile("the batch id must be 1 to 200 characters, no control characters")
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs must be 1 to {MAX_JOBS}")
    if dry_run and jobs > 1:
        raise ValueError("a dry run is one job: it counts what earlier rows would take")
    on_start(check_file(path))
    summary = BulkSummary()

    def report(result: RowResult) -> None:
        summary.add(result)
        on_row(result)

    ask = partial(row_request, batch_id=batch_id, actor=actor, repeat_window=repeat_window)
    if jobs > 1:
        rows = (ask(row) for row in read_rows(path))
        summary.stopped = JobPool(jobs).run(rows, should_stop=should_stop, on_row=report)
        return summary
    do_row = DryRun().check_row if dry_run else refund_row
    for row in read_rows(path):
        row, key, request = ask(row)
        report(refund_or_refuse(do_row, row, key, request))
    return summary


def row_request(
    row: BulkRow, *, batch_id: str, actor: str, repeat_window: timedelta | None = None
) -> tuple[BulkRow, str, dict]:
    """The row, its idempotency key and create_refund's arguments for it."""
    key = row.idempotency_key or f"{BULK_ROW_KEYS}:{batch_id}:{row.number}"
    request = {
        "charge_id": row.charge,
        "amount": row.amount,
        "idempotency_key": key,
        "reason": row.reason,
        "note": row.note,
        "actor": actor,
        "source": Refund.Source.BULK,
        "batch_id": batch_id,
        "refuse_repeats_within": repeat_window,
    }
    return row, key, request


def refund_or_refuse(
    do_row: Callable[[BulkRow, str, dict], RowResult], row: BulkRow, key: str, request: dict
) -> RowResult:
    """The row's result from `do_row`, or its refusal."""
    try:
        return do_row(row, key, request)
    except RepeatOfEarlier as exc:
        earlier = exc.earlier
        return RowResult(
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
        return RowResult(row, key, RowOutcome.REFUSED, code=exc.code, message=exc.message)


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
        self.spent: dict[str, int] = defaultdict(int)  # what earlier rows add to today's total

    def check_row(self, row: BulkRow, key: str, request: dict[str, Any]) -> RowResult:
        """The row's would_* result; raises the LedgerError the real run would refuse with."""
        sent = (row.charge, row.amount, row.reason, row.note)
        if key in self.keys_seen:  # as the real run would: replay, or refuse a reuse
            if self.keys_seen[key] != sent:
                raise IdempotencyKeyReused()
            return RowResult(row, key, RowOutcome.WOULD_REPLAY)
        self.keys_seen[key] = sent
        preview = preview_refund(**request, also_reserved=self.reserved[row.charge])
        outcome = RowOutcome.WOULD_REPLAY
        if preview.replay_of is None:
            self.reserved[row.charge] += preview.amount
            outcome = self.within_limits(request["actor"], preview.amount, preview.charge.currency)
        return RowResult(
            row,
            key,
            outcome,
            refund_id=preview.replay_of.id if preview.replay_of else "",
            amount=preview.amount,
            currency=preview.charge.currency,
        )

    def within_limits(self, actor, amount: int, currency: str) -> RowOutcome:
        """would_refund, or would_await_approval over the requester's limits (counting what
        the run's earlier rows would add to today's total)."""
        user = None if isinstance(actor, str) else actor
        label = actor_label(actor)
        found = limits.limits_for(user=user, actor_label=label, currency=currency)
        if not found.any:
            return RowOutcome.WOULD_REFUND
        now = timezone.now()
        spent = limits.spent_today(actor_label=label, currency=currency, now=now)
        if limits.needs_approval(found, amount=amount, spent=spent + self.spent[currency]):
            return RowOutcome.WOULD_AWAIT_APPROVAL
        self.spent[currency] += amount
        return RowOutcome.WOULD_REFUND


def job_for(charge: str, jobs: int) -> int:
    """The job that takes every row of this charge."""
    return zlib.crc32(charge.encode("utf-8", "surrogatepass")) % jobs


@dataclass
class _Job:
    number: int  # 1 to jobs, in messages
    process: Any
    conn: Connection
    waiting: deque = field(default_factory=deque)  # rows routed here, not yet sent
    sent: deque = field(default_factory=deque)  # seq numbers sent, answers come in order
    ended: bool = False  # its pipe is closed: the process has ended


class JobPool:
    """`jobs` forked processes refunding rows through create_refund, each on its own
    database connection. The parent reads the file, routes each row to the job of its
    charge, and reports the results in file order."""

    def __init__(self, jobs: int) -> None:
        self.size = jobs
        self.jobs: list[_Job] = []
        self.rows: dict[int, tuple[BulkRow, str]] = {}  # seq -> row and key, read, unreported
        self.results: dict[int, RowResult] = {}  # seq -> result, waiting for earlier rows
        self.live_keys: dict[str, list[int]] = {}  # key -> [job, rows read and not answered]
        self.next_seq = 0  # the seq of the next row read
        self.next_report = 0  # the seq of the next row to report
        self.failure: str = ""
        self.stopping = False

    def run(
        self,
        rows: Iterator[tuple[BulkRow, str, dict]],
        *,
        should_stop: Callable[[], bool],
        on_row: Callable[[RowResult], None],
    ) -> bool:
        """Refund `rows` (row, key, request), calling on_row in file order; True if
        stopped by should_stop before every row was done. Raises JobFailed."""
        self.on_row = on_row
        self.should_stop = should_stop
        self.start()
        try:
            held = None  # a row waiting until its key is out of another job's hands
            reading = True
            while not self.stopping:
                if self.should_stop() or self.failure:
                    self.stop()
                    break
                while reading and self.next_seq - self.next_report < READ_AHEAD:
                    held = held or next(rows, None)
                    if held is None:
                        reading = False
                    elif self.route(*held):
                        held = None
                    else:
                        break
                self.feed()
                if not reading and not any(job.waiting or job.sent for job in self.jobs):
                    break
                self.collect(timeout=0.1)
        except BaseException:
            self.stop()
            raise
        finally:
            self.finish()
        if self.failure:
            raise JobFailed(self.failure)
        return self.stopping

    def start(self) -> None:
        """Fork the jobs. The parent's connections are closed first so that no job shares
        one; every job opens its own."""
        context = multiprocessing.get_context("fork")
        connections.close_all()
        parent_ends: list[Connection] = []
        # Held back while forking: a job gets a stop only once its own handlers are set.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for number in range(1, self.size + 1):
                mine, theirs = context.Pipe()
                process = context.Process(
                    target=_job_main,
                    args=(theirs, os.getpid(), [*parent_ends, mine]),
                    name=f"bulk_refund job {number}",
                    daemon=True,
                )
                process.start()
                theirs.close()
                parent_ends.append(mine)
                self.jobs.append(_Job(number, process, mine))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def route(self, row: BulkRow, key: str, request: dict) -> bool:
        """Queue the row for its charge's job; False (not queued) while a row with the
        same key is in another job's hands, so that the earlier row of a key goes first."""
        job = self.jobs[job_for(row.charge, self.size)]
        live = self.live_keys.get(key)
        if live is not None and live[0] != job.number:
            return False
        if live is None:
            self.live_keys[key] = [job.number, 1]
        else:
            live[1] += 1
        self.rows[self.next_seq] = (row, key)
        job.waiting.append((self.next_seq, row, key, request))
        self.next_seq += 1
        return True

    def feed(self) -> None:
        """Send each job rows until it has JOB_QUEUE unanswered."""
        for job in self.jobs:
            while job.waiting and len(job.sent) < JOB_QUEUE and not job.ended:
                seq, row, key, request = job.waiting[0]
                try:
                    job.conn.send((seq, row, key, request))
                except OSError:
                    break  # the job has ended; collect() finds out why
                job.waiting.popleft()
                job.sent.append(seq)

    def collect(self, timeout: float) -> None:
        """Take the answers that are in (waiting up to `timeout` for one) and report
        every row whose earlier rows are all reported."""
        open_jobs = {job.conn: job for job in self.jobs if not job.ended}
        for ready in wait(list(open_jobs), timeout=timeout):
            conn = cast(Connection, ready)  # wait() answers with what it was given
            job = open_jobs[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):
                job.ended = True
                job.process.join(5)
                if job.sent and not (self.stopping or self.failure or self.should_stop()):
                    self.failure = (
                        f"job {job.number} ended (exit code {job.process.exitcode}) with rows "
                        "in hand; the rows it answered are reported"
                    )
                continue
            if message[0] == "error":
                self.failure = f"job {job.number} failed on a row:\n{message[1]}"
                continue
            seq, answered = message
            if job.sent.popleft() != seq:
                raise RuntimeError(f"job {job.number} answered out of order")
            row, key = self.rows.pop(seq)
            live = self.live_keys[key]
            live[1] -= 1
            if not live[1]:
                del self.live_keys[key]
            self.results[seq] = RowResult(row, key, **answered)
        while self.next_report in self.results:
            self.on_row(self.results.pop(self.next_report))
            self.next_report += 1

    def stop(self) -> None:
        """Tell every job to stop after its row in hand; rows not sent are dropped."""
        self.stopping = True
        for job in self.jobs:
            job.waiting.clear()
            if not job.ended and job.process.pid is not None:
                with suppress(ProcessLookupError):
                    os.kill(job.process.pid, signal.SIGTERM)

    def finish(self) -> None:
        """Wait for every job to end, report what they answered (in file order, past the
        rows a stop left undone), and reap them."""
        for job in self.jobs:
            if not job.ended:
                with suppress(OSError):
                    job.conn.send(None)  # no more rows (a stopped job does not read it)
        while any(not job.ended for job in self.jobs):
            self.collect(timeout=1.0)
        for seq in sorted(self.results):
            self.on_row(self.results.pop(seq))
        for job in self.jobs:
            job.process.join(5)
            if job.process.is_alive():
                job.process.kill()
                job.process.join()
            job.conn.close()


def _job_main(conn: Connection, parent_pid: int, close: list[Connection]) -> None:
    """A job: refund the rows the parent sends, one at a time, answering each in turn,
    until told there are no more, stopped by SIGTERM or SIGINT (after the row in hand),
    or orphaned."""
    stop: list[int] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    for other in close:
        other.close()
    try:
        while not stop and os.getppid() == parent_pid:
            if not conn.poll(0.1):
                continue
            message = conn.recv()
            if message is None:
                break
            seq, row, key, request = message
            try:
                result = refund_or_refuse(refund_row, row, key, request)
            except Exception:
                conn.send(("error", f"row {row.number}: {traceback.format_exc()}"))
                break
            fields = {name: getattr(result, name) for name in _ANSWERED}
            conn.send((seq, fields))
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        _wait_for_sends()
        connections.close_all()
        conn.close()


def _wait_for_sends() -> None:
    """Inline mode: wait for this job's send pool, as a command's exit does (a forked job
    ends with os._exit, which would cut its sends short and leave them to the worker)."""
    while in_flight():
        time.sleep(0.05)


# What a job answers for a row: every field of its RowResult but the row and key, which
# the parent already holds.
_ANSWERED = tuple(f.name for f in fields(RowResult) if f.name not in ("row", "key"))
