"""Database helpers that are about the connection, not about money."""

from __future__ import annotations

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
