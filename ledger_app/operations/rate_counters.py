"""Fixed-window counters in the database, shared exactly by every process and machine: the
API's rate limits count here (api/authentication.py)."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import DatabaseError, connections
from django.db.models import QuerySet

from ledger_app.db import drop_broken_connection
from ledger_app.operations.models import RateCounter

log = logging.getLogger("ledger_app.operations.rate_counters")

# The primary, always: a replica cannot count, and every process must see one count.
DATABASE = "default"
# Each process deletes ended windows at most this often, when it opens a new window.
PURGE_EVERY_SECONDS = 60.0
# Seconds since the epoch. Every machine's clock picks the window, so they must agree (NTP,
# which the admin's TOTP codes need anyway); tests set their own.
clock = time.time

# One statement for PostgreSQL and SQLite (both quote identifiers with double quotes; the
# table name is fixed in RateCounter.Meta.db_table).
INCREMENT_BELOW_LIMIT = """
    INSERT INTO "ledger_app_ratecounter" ("key", "window_started_at", "window_ends_at", "count")
    VALUES (%s, %s, %s, 1)
    ON CONFLICT ("key", "window_started_at")
    DO UPDATE SET "count" = "ledger_app_ratecounter"."count" + 1
    WHERE "ledger_app_ratecounter"."count" < %s
    RETURNING "count"
"""

_purge_lock = threading.Lock()
_last_purge_at = -math.inf  # time.monotonic() of this process's last purge


@dataclass(frozen=True)
class WindowCount:
    """One use counted against a limit. `within_limit` False: refuse; the window ends in
    `seconds_left`. `counted` False: the database failed and the use was let through."""

    within_limit: bool
    seconds_left: float
    counted: bool = True


def count_in_window(*, key: str, limit: int, period_seconds: int) -> WindowCount:
    """Counts one use of `key` in the current fixed window of `period_seconds` (aligned on
    the Unix epoch, UTC) unless `limit` uses are counted already: then it is refused and
    not counted. One statement, in autocommit: the row is locked only while that statement
    runs, so concurrent processes queue on it for microseconds and never lose a count.
    A database error lets the use through (logged); see docs/operating/rate-limits.md."""
    now = clock()
    started = now - now % period_seconds
    seconds_left = started + period_seconds - now
    # The period is part of the key: a window of another period that starts at the same
    # second (during a deploy that changes the setting) is another count.
    window_key = f"{key}/{period_seconds}s"
    try:
        count = _increment_below(
            key=window_key,
            started_at=datetime.fromtimestamp(started, UTC),
            ends_at=datetime.fromtimestamp(started + period_seconds, UTC),
            limit=limit,
        )
    except DatabaseError:
        log.warning("rate counter unavailable, %s let through uncounted", key, exc_info=True)
        drop_broken_connection()
        return WindowCount(within_limit=True, seconds_left=seconds_left, counted=False)
    if count == 1:
        _purge_now_and_then()
    return WindowCount(within_limit=count is not None, seconds_left=seconds_left)


def _increment_below(
    *, key: str, started_at: datetime, ends_at: datetime, limit: int
) -> int | None:
    """The window's new count, or None if it had reached `limit` (then nothing is written).
    INSERT ... ON CONFLICT DO UPDATE is atomic on PostgreSQL (a concurrent insert waits and
    then updates) and on SQLite (3.35+ for RETURNING), so there is no read-then-write."""
    db = connections[DATABASE]
    with db.cursor() as cursor:
        cursor.execute(
            INCREMENT_BELOW_LIMIT,
            [
                key,
                db.ops.adapt_datetimefield_value(started_at),
                db.ops.adapt_datetimefield_value(ends_at),
                limit,
            ],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def ended_windows(*, now: datetime) -> QuerySet[RateCounter]:
    """The counters of windows that had ended by `now`: nothing reads them again."""
    return RateCounter.objects.using(DATABASE).filter(window_ends_at__lte=now)


def purge_ended_windows() -> int:
    """Deletes the counters of windows that have ended (nothing reads them again)."""
    deleted, _ = ended_windows(now=datetime.fromtimestamp(clock(), UTC)).delete()
    return deleted


def _purge_now_and_then() -> None:
    """Purges at most every PURGE_EVERY_SECONDS per process, and only when a window opens,
    so the table holds about one row per active key and limit, and a purge costs one
    indexed DELETE a minute per process. A failed purge waits for the next one."""
    global _last_purge_at
    with _purge_lock:
        if time.monotonic() - _last_purge_at < PURGE_EVERY_SECONDS:
            return
        _last_purge_at = time.monotonic()
    try:
        purge_ended_windows()
    except DatabaseError:
        log.warning("rate counter purge failed", exc_info=True)
        drop_broken_connection()
