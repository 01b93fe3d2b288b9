"""The one place rows are written with raw SQL: the reserve's (refunds/services.py) and
the settle's (provider/dispatch/settle.py), which every refund runs under its charge's
row lock; everything else writes through the ORM.

The lock is held from the check to the commit, so every round trip and every millisecond
of ORM work between them is time no other refund of that charge can use. Here the rows
are plain model instances built in Python, each table's INSERT is compiled once per
process, and on PostgreSQL all of a change's statements go in one round trip as
data-modifying CTEs (foreign keys are checked at commit, so rows may point at each other
within it). On SQLite they run one after the other. Nothing here checks anything:
callers write only after their last check passed, inside their transaction.

What save() would have run is not skipped: the models written here have no signal
receivers and no save() of their own but the ledger's append-only guard, which concerns
updates (tests/test_sql_writes.py checks both, and that the rows are the ORM's).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from django.db import connection, models

from ledger_app import db

Statement = tuple[str, list[Any]]


@functools.cache
def _insert_sql(
    model: type[models.Model], rows: int
) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    opts = model._meta
    fields = tuple(
        f for f in opts.concrete_fields if not (f.primary_key and isinstance(f, models.AutoField))
    )
    quote = connection.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join([row] * rows)
    # Names from the model's own metadata, values always as parameters.
    sql = f"INSERT INTO {quote(opts.db_table)} ({columns}) VALUES {values}"  # noqa: S608
    return sql, fields


def insert(objs: Sequence[models.Model], *, skip_conflicts: bool = False) -> Statement | None:
    """The INSERT of these new instances of one model (None for none). Defaults and
    auto_now values are filled in on the instances, which count as saved afterwards; an
    auto id is not read back (the instance's pk stays None: nothing reads it after).
    `skip_conflicts`: a row that would break a unique constraint is left out (ON CONFLICT
    DO NOTHING), as bulk_create(ignore_conflicts=True) does."""
    if not objs:
        return None
    sql, fields = _insert_sql(type(objs[0]), len(objs))
    if skip_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for obj in objs for f in fields]
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
    return sql, params


def update(obj: models.Model, fields: Sequence[str]) -> Statement:
    """The UPDATE of these fields of a saved instance (auto_now fields are refreshed)."""
    opts = type(obj)._meta
    quote = connection.ops.quote_name
    chosen = [
        cast("models.Field[Any, Any]", opts.get_field(name)) for name in fields
    ]  # concrete fields
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in chosen)
    params = [f.get_db_prep_save(f.pre_save(obj, False), connection) for f in chosen]
    table, key = quote(opts.db_table), quote(opts.pk.column)
    sql = f"UPDATE {table} SET {assignments} WHERE {key} = %s"  # noqa: S608 - as above
    return sql, [*params, opts.pk.get_db_prep_value(obj.pk, connection)]


def execute_together(statements: Sequence[Statement | None]) -> None:
    """Run the statements in order, in the caller's transaction: in one round trip on
    PostgreSQL, bound on the server so that it is prepared once per connection
    (db.statement_cursor); one by one elsewhere."""
    present = [s for s in statements if s is not None]
    if not connection.in_atomic_block:
        raise RuntimeError("execute_together runs inside the change's transaction")
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            for sql, params in present:
                cursor.execute(sql, params)
        return
    with db.statement_cursor(numbered=True) as cursor:
        cursor.execute(
            _together(tuple(sql for sql, _ in present)), [p for _, ps in present for p in ps]
        )


@functools.lru_cache(maxsize=128)
def _together(sqls: tuple[str, ...]) -> str:
    """These statements as one, with PostgreSQL's numbered placeholders: all but the last
    as data-modifying CTEs (foreign keys are checked at commit, so rows may point at each
    other within it). Made once per shape: psycopg would otherwise translate the %s of
    the whole, which is too long for it to cache, for every refund."""
    numbered, first = [], 1
    for sql in sqls:
        numbered.append(db.numbered(sql, first))
        first += sql.count("%s")
    *ctes, last = numbered
    if not ctes:
        return last
    return "WITH " + ", ".join(f"w{n} AS ({sql})" for n, sql in enumerate(ctes)) + " " + last
