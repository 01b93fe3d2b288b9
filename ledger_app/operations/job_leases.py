"""One process at a time for a job, on PostgreSQL and SQLite alike: a row (JobLease) claimed
with one conditional UPDATE, renewed while the job works, left to run out if its process dies.

Why a row and not PostgreSQL's advisory lock: the embedded default is SQLite, which has
none; a session's advisory lock is lost or kept by mistake behind a pool that hands the
connection to another thread; and the worker's daily schedule must remember when a run last
finished anyway, which is one more column on the same row.
"""

from __future__ import annotations

import os
import platform
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from ledger_app.db import ensure_no_transaction
from ledger_app.operations.models import JobLease


@dataclass(frozen=True)
class Lease:
    """A claim this process holds on the job `name`, as `holder`, renewed `seconds` ahead."""

    name: str
    holder: str
    seconds: float


def claim_lease(
    *, name: str, seconds: float, finished_before: datetime | None = None
) -> Lease | None:
    """The job's lease for `seconds`, if nobody holds it (never claimed, freed, or run out:
    its holder died); with `finished_before`, only if the job's last whole run finished
    before then, or never did. None otherwise.

    One conditional UPDATE decides between any number of processes and machines. On
    PostgreSQL a second claimer waits for the first one's row lock, then re-reads the row
    and finds it taken; on SQLite every write transaction takes the database's write lock
    first (IMMEDIATE), so claims run one after the other. It commits on its own."""
    ensure_no_transaction()
    JobLease.objects.bulk_create([JobLease(name=name)], ignore_conflicts=True)
    now = timezone.now()
    rows = JobLease.objects.filter(
        Q(leased_until__isnull=True) | Q(leased_until__lte=now), name=name
    )
    if finished_before is not None:
        rows = rows.filter(
            Q(last_finished_at__isnull=True) | Q(last_finished_at__lte=finished_before)
        )
    holder = f"{platform.node()[:100]}:{os.getpid()}:{secrets.token_hex(4)}"
    if rows.update(holder=holder, leased_until=now + timedelta(seconds=seconds)) != 1:
        return None
    return Lease(name=name, holder=holder, seconds=seconds)


def renew_lease(lease: Lease) -> bool:
    """Pushes the lease `seconds` past now; False if this process no longer holds it (it
    ran out and another process claimed the job). Call it in the transaction of each piece
    of work, so that the piece commits only under a lease still held."""
    until = timezone.now() + timedelta(seconds=lease.seconds)
    return (
        JobLease.objects.filter(name=lease.name, holder=lease.holder).update(leased_until=until)
        == 1
    )


def release_lease(lease: Lease, *, finished: bool) -> None:
    """Frees the job for the next claimer at once; `finished`: a whole run ended now (the
    daily schedule counts from it). Nothing happens if the lease was lost meanwhile."""
    fields: dict[str, object] = {"holder": "", "leased_until": None}
    if finished:
        fields["last_finished_at"] = timezone.now()
    JobLease.objects.filter(name=lease.name, holder=lease.holder).update(**fields)


def lease_state(*, name: str) -> JobLease | None:
    """The job's row as it is now: who holds it until when, when a run last finished."""
    return JobLease.objects.filter(name=name).first()
