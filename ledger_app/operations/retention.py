"""Removing what has expired (`purge_expired`): each kind in short batches, each batch
selected by an index, deleted and committed on its own, by one process at a time. What
expires, and by which rule, is expiry.py's; docs/operating/retention.md says what is kept,
how long and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from ledger_app import faults
from ledger_app.counts import count_of
from ledger_app.operations import job_leases, rate_counters
from ledger_app.operations.expiry import KINDS, Table, batch_select, retention_days
from ledger_app.operations.models import JobLease

log = logging.getLogger("ledger_app.retention")

JOB = "purge_expired"  # its JobLease row
# Rows per batch: one short transaction each (milliseconds), so no lock is held for long
# and a stop request or a lost lease ends the run between two batches.
BATCH_SIZE = 1000
# After each batch the run waits PAUSE times as long as the batch took: it deletes at most
# half of the time, so the WAL it writes does not queue refunds' commits behind it (they
# wait on its flushes, not on its locks: docs/benchmarks.md, Data that expires). 0: as
# fast as it goes.
PAUSE = 1.0
# A run renews its lease with every batch; a process that dies frees the job this long after.
LEASE_SECONDS = 300.0
# The refund worker's schedule: a run when a whole run last finished this long ago (or
# never), in slices of at most SLICE_SECONDS between its passes over refunds.
EVERY = timedelta(days=1)
SLICE_SECONDS = 10.0


@dataclass(frozen=True)
class Tally:
    noun: str
    plural: str
    count: int

    def __str__(self) -> str:
        return count_of(self.count, self.noun, self.plural)


@dataclass(frozen=True)
class Purged:
    """What one kind lost (a dry run: would lose); `finished` False: the run stopped in it."""

    kind: str
    label: str
    rule: str
    tallies: tuple[Tally, ...]
    finished: bool = True

    def line(self, *, dry_run: bool) -> str:
        counts = ", ".join(str(t) for t in self.tallies)
        done = "would be deleted" if dry_run else "deleted"
        end = "" if self.finished else " (stopped before the end)"
        return f"{self.label}, {self.rule}: {counts} {done}{end}"


@dataclass(frozen=True)
class PurgeResult:
    """A run's outcome. `held_by`: another process holds the job, so nothing was done.
    `finished`: every kind asked for was taken to its end. `lease_lost`: the lease ran out
    under this run and another process claimed the job, so this one stopped (its last batch
    rolled back)."""

    dry_run: bool
    purged: tuple[Purged, ...] = ()
    finished: bool = False
    held_by: JobLease | None = None
    lease_lost: bool = False

    @property
    def ran(self) -> bool:
        return self.held_by is None


class LeaseLost(Exception):
    """The job's lease ran out under this run and another process claimed it."""


@dataclass(frozen=True)
class Pace:
    """How fast a run goes: `batch_size` rows per batch, a wait of `pause` times as long as
    a batch took after each, and a lease of `lease_seconds` renewed with every batch."""

    batch_size: int = BATCH_SIZE
    pause: float = PAUSE
    lease_seconds: float = LEASE_SECONDS


@dataclass(frozen=True)
class _Run:
    """One run's options, handed down its steps. No `lease`: a dry run."""

    kinds: Sequence[str]
    days: Mapping[str, int]
    pace: Pace
    should_stop: Callable[[], bool]
    on_kind: Callable[[Purged], None]
    lease: job_leases.Lease | None = None

    @property
    def dry_run(self) -> bool:
        return self.lease is None


def purge_expired(
    *,
    kinds: Sequence[str] = tuple(KINDS),
    dry_run: bool = False,
    days: Mapping[str, int] | None = None,
    pace: Pace = Pace(),
    should_stop: Callable[[], bool] = lambda: False,
    on_kind: Callable[[Purged], None] = lambda purged: None,
) -> PurgeResult:
    """Removes what has expired of each of `kinds` (all by default), each kind's tables in
    batches of `pace.batch_size` rows, oldest first by an indexed column: select the
    batch's ids, delete them, commit; nothing else is held between batches, and the run
    waits `pace.pause` times as long as a batch took before the next. A kind is kept its
    setting's number of days (`days` overrides some), counted back from the run's start.

    One run at a time over every process and machine: the run claims the job's lease
    (job_leases) and renews it in each batch's transaction; if another process holds it,
    nothing is done and `held_by` says who. A run that loses its lease (it stalled past
    `pace.lease_seconds` and another claimed the job) rolls its batch back and stops.
    `should_stop` is asked before each batch. A whole run (every kind, the settings'
    days) that finishes is recorded, for the worker's daily schedule.

    `dry_run`: counts what would go, through the same selections, and writes nothing (no
    lease: it changes nothing another run could trip on). `on_kind` hears each kind as it
    ends."""
    _check_bounds(kinds, days or {}, pace)
    run = _Run(kinds, days or {}, pace, should_stop, on_kind)
    if dry_run:
        return _run(run)
    lease = job_leases.claim_lease(name=JOB, seconds=pace.lease_seconds)
    if lease is None:
        return PurgeResult(dry_run=False, held_by=job_leases.lease_state(name=JOB))
    whole = set(kinds) == set(KINDS) and not days
    return _run_under(replace(run, lease=lease), whole=whole)


def _check_bounds(kinds: Sequence[str], days: Mapping[str, int], pace: Pace) -> None:
    """ValueError for a kind that does not exist, or a batch size or days below 1."""
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or pace.batch_size < 1 or pace.pause < 0 or any(n < 1 for n in days.values()):
        raise ValueError(f"purge_expired: unknown kinds {unknown} or a bound below 1")


def purge_expired_if_due(
    *,
    should_stop: Callable[[], bool] = lambda: False,
    slice_seconds: float = SLICE_SECONDS,
    on_kind: Callable[[Purged], None] = lambda purged: None,
) -> PurgeResult | None:
    """The refund worker's daily purge: a run of every kind when a whole run last finished
    EVERY ago or more, or never (read from the database, so restarts and other workers
    agree), claimed with that condition in the same UPDATE as the lease, so two workers
    that both find it due run it once. It works at most `slice_seconds` and then stops
    between batches; the next call goes on (the run is not finished, so still due). None:
    not due, or another process holds the job."""
    state = job_leases.lease_state(name=JOB)
    now = timezone.now()
    if state is not None and (
        (state.last_finished_at is not None and state.last_finished_at > now - EVERY)
        or (state.leased_until is not None and state.leased_until > now)
    ):
        return None  # a read, not a write, on the worker's frequent path
    lease = job_leases.claim_lease(name=JOB, seconds=LEASE_SECONDS, finished_before=now - EVERY)
    if lease is None:
        return None
    deadline = time.monotonic() + slice_seconds

    def stop() -> bool:
        return should_stop() or time.monotonic() >= deadline

    return _run_under(_Run(tuple(KINDS), {}, Pace(), stop, on_kind, lease), whole=True)


def _run_under(run: _Run, *, whole: bool) -> PurgeResult:
    """`run` under its lease, released at the end whatever happens; `whole`: a finished
    run is recorded as the daily schedule's."""
    assert run.lease is not None
    result = PurgeResult(dry_run=False)
    try:
        result = _run(run)
    finally:
        try:
            job_leases.release_lease(run.lease, finished=whole and result.finished)
        except DatabaseError:  # the database went away: the lease runs out on its own
            log.warning("purge_expired: lease not released; it runs out", exc_info=True)
    return result


def _run(run: _Run) -> PurgeResult:
    """Each kind in turn, until one stops before its end."""
    now = timezone.now()
    done: list[Purged] = []
    for name in run.kinds:
        purged, lease_lost = _purge_kind(run, name, now)
        run.on_kind(purged)
        done.append(purged)
        if lease_lost:
            return PurgeResult(dry_run=run.dry_run, purged=tuple(done), lease_lost=True)
        if not purged.finished:
            return PurgeResult(dry_run=run.dry_run, purged=tuple(done))
    return PurgeResult(dry_run=run.dry_run, purged=tuple(done), finished=True)


def _purge_kind(run: _Run, name: str, now: datetime) -> tuple[Purged, bool]:
    """One kind's tables in turn: what it lost, and whether the lease was lost in it."""
    kind = KINDS[name]
    kind_now, cutoff, rule = _kind_edge(run, name, now)
    tallies: list[Tally] = []
    finished = True
    try:
        for table in kind.tables:
            counts, finished = _purge_table(run, table, kind_now, cutoff)
            tallies.append(Tally(table.noun, table.plural, counts[0]))
            if table.dependents is not None:
                tallies.append(Tally(table.dependents.noun, table.dependents.plural, counts[1]))
            if not finished:
                break
    except LeaseLost:
        log.warning("purge_expired: lease lost in %s; another process has the job", name)
        return Purged(name, kind.label, rule, tuple(tallies), finished=False), True
    purged = Purged(name, kind.label, rule, tuple(tallies), finished=finished)
    log.info("purge_expired: %s", purged.line(dry_run=run.dry_run))
    return purged, False


def _kind_edge(run: _Run, name: str, now: datetime) -> tuple[datetime, datetime, str]:
    """The kind's clock, its cutoff, and its rule in words."""
    kept = run.days.get(name, retention_days(name))
    if kept is None:  # rate counters: their module's clock says which windows ended
        at = datetime.fromtimestamp(rate_counters.clock(), UTC)
        return at, at, KINDS[name].rule
    return now, now - timedelta(days=kept), f"older than {count_of(kept, 'day')}"


def _purge_table(
    run: _Run, table: Table, now: datetime, cutoff: datetime
) -> tuple[tuple[int, int], bool]:
    """(rows deleted, dependents deleted), and whether the table was taken to its end.
    A dry run counts the same selection."""
    expired = table.expired(now, cutoff)
    if run.lease is None:
        dependents = table.dependents.count(expired) if table.dependents else 0
        return (expired.count(), dependents), True
    deleted = dependents_deleted = 0
    cursor = None
    while not run.should_stop():
        began = time.monotonic()
        batch = _delete_batch(run.lease, table, expired, cursor, run.pace.batch_size)
        if batch is None:
            return (deleted, dependents_deleted), True
        removed, dependents, cursor = batch
        deleted += removed
        dependents_deleted += dependents
        faults.checkpoint("purge.batch_committed")
        if removed == 0:  # selected yet not deleted: never loop on it
            log.warning("purge_expired: a batch of %s deleted nothing; next kind", table.plural)
            return (deleted, dependents_deleted), True
        if run.pace.pause:
            time.sleep(run.pace.pause * (time.monotonic() - began))
    return (deleted, dependents_deleted), False


def _delete_batch(
    lease: job_leases.Lease, table: Table, expired: QuerySet[Any], cursor: Any, batch_size: int
) -> tuple[int, int, Any] | None:
    """One batch in its own transaction, which renews the lease: (rows deleted, dependents
    deleted, the next batch's cursor), or None when nothing is left."""
    with transaction.atomic(durable=True):
        if not job_leases.renew_lease(lease):
            raise LeaseLost()
        rows = list(batch_select(table, expired, cursor, batch_size))
        if not rows:
            return None
        ids = list(dict.fromkeys(pk for pk, _ in rows))
        dependents = table.dependents.delete(ids) if table.dependents is not None else 0
        # The rule again in the DELETE: a row that stopped matching it since the SELECT
        # (a delivery resent, say) stays.
        removed = (
            expired.filter(**{f"{table.by}__in": ids})
            .only("pk")
            .delete()[1]
            .get(expired.model._meta.label, 0)
        )
    # Rows of the batch's last instant may remain (ties past the limit); earlier ones
    # are gone or kept by the rule, so the next batch starts there.
    return removed, dependents, rows[-1][1]
