"""Database helpers that are about the connection, not about money."""

from __future__ import annotations

import contextvars
import functools
import re
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, InternalError, OperationalError, connection, transaction
from django.db.models import QuerySet

_Row = TypeVar("_Row")


def connection_lost(exc: BaseException) -> bool:
    """The connection failed, not the statement: OperationalError and InterfaceError, and
    the InternalError psycopg raises itself (no SQLSTATE: the server never sent one) when
    it loses track of the conversation, as when a pooler's server connection dies in the
    middle of a command. A request that meets one answers 503 database_unavailable and a
    loop command retries its pass; a statement the server refused is never one of these."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, InternalError) and getattr(exc.__cause__, "sqlstate", "") is None


def is_lock_timeout(exc: OperationalError) -> bool:
    """PostgreSQL gave up waiting for a row lock (lock_timeout, SQLSTATE 55P03)."""
    return getattr(exc.__cause__, "sqlstate", None) == "55P03"


# When the lock waits of the transaction being made began (time.monotonic()), None outside
# lock_wait_budget.
_lock_waits_began: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "lock_waits_began", default=None
)
# Spent less than this, the session's own lock_timeout is still the budget near enough,
# and before_lock_wait sends nothing: the first wait of every request costs no round trip.
LOCK_BUDGET_SLACK_MS = 10


@contextmanager
def lock_wait_budget() -> Iterator[None]:
    """Around one request's transaction (a refund's or a charge's create): all its lock
    waits together, the key's claim, the requester's lock, the charge's row, last at most
    DATABASE_LOCK_TIMEOUT_MS, not that long each. Each wait that may come after another
    calls before_lock_wait() first."""
    token = _lock_waits_began.set(time.monotonic())
    try:
        yield
    finally:
        _lock_waits_began.reset(token)


def before_lock_wait() -> None:
    """Before a statement that may wait for a lock, inside lock_wait_budget's transaction
    on PostgreSQL: its lock_timeout is what is left of the budget (SET LOCAL: this
    transaction only; at least 1 ms, as 0 would mean no limit). What is left counts from
    the budget's start, so time spent between waits is counted too: the bound holds.
    Elsewhere, or with almost nothing spent yet, nothing is sent."""
    began = _lock_waits_began.get()
    if began is None or connection.vendor != "postgresql" or not connection.in_atomic_block:
        return
    spent_ms = (time.monotonic() - began) * 1000
    if spent_ms < LOCK_BUDGET_SLACK_MS:
        return
    left_ms = max(1, int(settings.DATABASE_LOCK_TIMEOUT_MS - spent_ms))
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{left_ms}ms"])


def drop_broken_connection() -> None:
    """After a DatabaseError outside any transaction: if the connection no longer works
    (the server ended it, the network dropped), close it so the next query opens a new
    one instead of failing on the dead one."""
    if not connection.in_atomic_block and not connection.is_usable():
        connection.close()


def streamed(queryset: QuerySet[Any, _Row], chunk_size: int) -> Generator[_Row, None, None]:
    """The queryset's rows fetched `chunk_size` at a time from a server-side cursor. Outside
    a transaction Django declares the cursor WITH HOLD and fetches from it in later
    statements, which a pooler in transaction mode may send to another server connection:
    behind one (DATABASE_TRANSACTION_POOLER) the rows are read inside a transaction of their
    own (a read: nothing commits), so every fetch is on the connection that holds the
    cursor, which the reader holds until the last row or close(). Every iterator() of the
    back office goes through here (tests/test_pooler_safe.py)."""
    if not settings.DATABASE_TRANSACTION_POOLER:
        yield from queryset.iterator(chunk_size=chunk_size)
        return
    with transaction.atomic(using=queryset.db):
        yield from queryset.iterator(chunk_size=chunk_size)


def uses_pool() -> bool:
    """Connections come from Django's psycopg pool (DATABASE_POOL_MAX_SIZE)."""
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


def release_connection() -> None:
    """Before waiting on something other than the database (the provider, another
    thread), with no transaction open: give this thread's connection back to the pool,
    so a thread that waits holds none. Without a pool the connection is kept (closing
    it would only cost a reconnect)."""
    if uses_pool() and not connection.in_atomic_block:
        connection.close()


def ensure_no_transaction() -> None:
    """What transaction.atomic(durable=True) checks, for a single statement that commits
    on its own in autocommit (one round trip, not BEGIN, the statement and COMMIT): that
    no transaction is open around it, so it is committed when it returns. A test's own
    transaction (Django's TestCase) is allowed, as atomic(durable=True) allows it."""
    blocks = connection.atomic_blocks
    if blocks and not getattr(blocks[-1], "_from_testcase", False):
        raise RuntimeError("this must commit on its own: it runs outside any transaction")


@contextmanager
def statement_cursor(*, numbered: bool = False) -> Iterator[Any]:
    """A cursor for the few statements every refund runs, each the same text every time
    (the compiled reads, the key's claim, the reserve's and the settle's writes).

    On PostgreSQL it binds the values on the server, so psycopg prepares a statement once
    it has run a few times on a connection (prepare_threshold) and PostgreSQL stops
    parsing and planning it for every refund; Django's own cursors bind on this side and
    never prepare. `numbered`: the SQL has PostgreSQL's own $1, $2 ... (see `numbered`),
    for a statement too long for psycopg to cache its translation of %s. It is still one
    of Django's cursors (execute wrappers, query logging and error translation see it).
    Elsewhere it is Django's cursor, and the SQL uses %s."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg
    from django.db.backends.postgresql.base import (  # type: ignore[attr-defined]  # psycopg 3's, which PostgreSQL runs on here
        ServerBindingCursor,
    )

    connection.ensure_connection()
    with connection.wrap_database_errors:
        kind = psycopg.RawCursor if numbered else ServerBindingCursor
        raw = kind(connection.connection)
    # What Django's connection.cursor() does with the cursor it makes: the thread check,
    # and the wrapper that runs execute wrappers and logs queries when asked to.
    with connection._prepare_cursor(raw) as cursor:  # type: ignore[attr-defined]  # Django's own, unstubbed
        yield cursor


_PLACEHOLDER = re.compile(r"%s")


@functools.lru_cache(maxsize=64)
def numbered(sql: str, first: int = 1) -> str:
    """`sql` with its %s placeholders as PostgreSQL's $first, $first+1 ... (for
    statement_cursor(numbered=True)). Our statements' SQL holds no other %."""
    if "%" in _PLACEHOLDER.sub("", sql):
        raise ValueError("numbered() takes SQL whose only % are %s placeholders")
    count = iter(range(first, first + sql.count("%s")))
    return _PLACEHOLDER.sub(lambda _: f"${next(count)}", sql)
