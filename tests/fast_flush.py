"""Emptying the PostgreSQL test database between transactional tests with DELETE, not
TRUNCATE.

Django empties every table after each test that commits (transaction=True, live_server)
with one `TRUNCATE` of all of them. On PostgreSQL that gives every table and index new
files, which the commit then syncs: about 0.3 s on this machine, for tables that hold a
few rows, and over 350 such tests. DELETE of a few rows costs milliseconds.

The result is the same: every table empty, sequences not reset (Django's TRUNCATE does
not restart them either). Foreign keys are DEFERRABLE INITIALLY DEFERRED and the flush
runs in one transaction, so the order of the DELETEs does not matter. A table with a
trigger of its own (the append-only ledger refuses DELETE) is still truncated: a trigger
on DELETE is exactly what TRUNCATE does not fire, and nothing references those tables.
"""

from __future__ import annotations

from django.db.backends.postgresql.operations import DatabaseOperations

_truncate_flush = DatabaseOperations.sql_flush
_guarded: dict[str, frozenset[str]] = {}


def _tables_with_triggers(connection) -> frozenset[str]:
    alias = connection.alias
    if alias not in _guarded:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal"
            )
            _guarded[alias] = frozenset(name.strip('"') for (name,) in cursor.fetchall())
    return _guarded[alias]


def _delete_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    if reset_sequences or allow_cascade or not tables:
        return _truncate_flush(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
    guarded = _tables_with_triggers(self.connection)
    truncated = [table for table in tables if table in guarded]
    # Django's own table names, quoted as identifiers: nothing from outside reaches here.
    statements = [f"DELETE FROM {self.quote_name(t)};" for t in tables if t not in guarded]  # noqa: S608
    if truncated:
        statements.insert(0, f"TRUNCATE {', '.join(map(self.quote_name, truncated))};")
    return statements


def install() -> None:
    DatabaseOperations.sql_flush = _delete_flush  # type: ignore[method-assign]
