"""Database helpers that are about the connection, not about money."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import OperationalError, connection


def is_lock_timeout(exc: OperationalError) -> bool:
    """PostgreSQL gave up waiting for a row lock (lock_timeout, SQLSTATE 55P03)."""
    return getattr(exc.__cause__, "sqlstate", None) == "55P03"


def drop_broken_connection() -> None:
    """After a DatabaseError outside any transaction: if the connection no longer works
    (the server ended it, the network dropped), close it so the next query opens a new
    one instead of failing on the dead one."""
    if not connection.in_atomic_block and not connection.is_usable():
        connection.close()


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
