"""The process pool behind `bulk_refund --jobs N`: N forked jobs, each on its own database
connection, refunding the rows the parent routes to it, one at a time.

Every row of one charge goes to the same job (crc32 of the charge id mod jobs) and a job
takes its rows in file order, so each charge sees its rows in file order; a row whose key
is still in another job's hands waits for it. The rows are reported in file order, and at
most READ_AHEAD are read and not yet reported, so memory stays flat however long the file.
SIGTERM or SIGINT to a job, or a stop from the parent: it finishes the row in hand and
takes no other.

The pool knows rows only as PoolRow (a number and a charge): bulk.py hands it its rows,
their requests and the work to do on each, so this module imports nothing of bulk.py."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, Protocol, TypeVar, cast

from django.db import connections

from ledger_app.provider.dispatch.pool import in_flight

JOB_QUEUE = 8  # rows sent to a job and not yet answered, the one in hand included
READ_AHEAD = 2_000  # rows read and not yet reported, at most: what memory holds
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class PoolRow(Protocol):
    """What the pool reads of a row: its number (in messages) and its charge (its job)."""

    @property
    def number(self) -> int: ...

    @property
    def charge(self) -> str: ...


Row = TypeVar("Row", bound=PoolRow)
Request = TypeVar("Request")  # what the work is given for a row besides the row and key
Result = TypeVar("Result")  # what the work makes of a row, reported in file order


class JobFailed(Exception):
    """A job process met an error that is not a refusal (or died); the other jobs were
    stopped after their row in hand and the rows done were reported."""


def job_for(charge: str, jobs: int) -> int:
    """The job that takes every row of this charge."""
    return zlib.crc32(charge.encode("utf-8", "surrogatepass")) % jobs


@dataclass
class _Job(Generic[Row, Request]):
    number: int  # 1 to jobs, in messages
    process: Any
    conn: Connection
    # rows routed here, not yet sent: (seq, row, key, request)
    waiting: deque[tuple[int, Row, str, Request]] = field(default_factory=deque)
    sent: deque[int] = field(default_factory=deque)  # seq numbers sent, answers come in order
    ended: bool = False  # its pipe is closed: the process has ended


class JobPool(Generic[Row, Request, Result]):
    """`jobs` forked processes refunding rows through create_refund, each on its own
    database connection. The parent reads the file, routes each row to the job of its
    charge, and reports the results in file order."""

    def __init__(self, jobs: int, work: Callable[[Row, str, Request], Result]) -> None:
        self.size = jobs
        self.work = work  # what a job does with a row: its result, or its refusal
        self.jobs: list[_Job[Row, Request]] = []
        self.rows: dict[int, tuple[Row, str]] = {}  # seq -> row and key, read, unreported
        self.results: dict[int, Result] = {}  # seq -> result, waiting for earlier rows
        self.live_keys: dict[str, list[int]] = {}  # key -> [job, rows read and not answered]
        self.next_seq = 0  # the seq of the next row read
        self.next_report = 0  # the seq of the next row to report
        self.failure: str = ""
        self.stopping = False

    def run(
        self,
        rows: Iterator[tuple[Row, str, Request]],
        *,
        should_stop: Callable[[], bool],
        on_row: Callable[[Result], None],
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
                    args=(theirs, os.getpid(), [*parent_ends, mine], self.work),
                    name=f"bulk_refund job {number}",
                    daemon=True,
                )
                process.start()
                theirs.close()
                parent_ends.append(mine)
                self.jobs.append(_Job(number, process, mine))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def route(self, row: Row, key: str, request: Request) -> bool:
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
            seq, result = message
            if job.sent.popleft() != seq:
                raise RuntimeError(f"job {job.number} answered out of order")
            row, key = self.rows.pop(seq)
            live = self.live_keys[key]
            live[1] -= 1
            if not live[1]:
                del self.live_keys[key]
            self.results[seq] = result
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


def _job_main(
    conn: Connection,
    parent_pid: int,
    close: list[Connection],
    work: Callable[[Row, str, Request], Result],
) -> None:
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
                result = work(row, key, request)
            except Exception:
                conn.send(("error", f"row {row.number}: {traceback.format_exc()}"))
                break
            conn.send((seq, result))
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
