"""The reads every refund makes (the live webhook endpoints and its charge under lock;
through the API also the key and its limits), compiled to SQL by Django's ORM once per
connection, then run straight through a cursor: the same SQL and the same model
instances, without building and compiling the query again each time (about a
millisecond of Python per refund, some of it inside the charge's lock). Anything else
reads through the ORM as usual."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from ledger_app.db import statement_cursor

M = TypeVar("M", bound=models.Model)

# Stands for the primary key while the query is compiled; replaced by the real one.
KEY: Any = "\x00compiled-key\x00"


@dataclass(frozen=True)
class _Compiled(Generic[M]):
    model: type[M]
    sql: str
    params: tuple[Any, ...]
    key_at: int | None  # where the key goes among the params
    fields: list[str]  # the columns' attribute names, in the SELECT's order
    converters: list[tuple[int, tuple[list[Any], Any]]]  # the ORM's, per column (JSON, times)


def _compile(build: Callable[[], models.QuerySet[M]]) -> _Compiled[M]:
    """build()'s query, for this thread's connection (the SQL differs between databases,
    FOR UPDATE above all, and the ORM's converters belong to the connection)."""
    # On the thread's own connection object: `connection` is a proxy every thread shares.
    own = connections[DEFAULT_DB_ALIAS]
    kept: dict[Any, _Compiled[Any]] = own.__dict__.setdefault("_compiled_queries", {})
    if build not in kept:
        queryset = build()
        compiler = queryset.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        columns = [column for column, _, _ in compiler.select]
        fields = [f.attname for f in queryset.model._meta.concrete_fields]
        if len(columns) != len(fields):
            raise ValueError(f"{build.__name__} must select its model's own columns only")
        kept[build] = _Compiled(
            model=queryset.model,
            sql=sql,
            params=tuple(params),
            key_at=params.index(KEY) if KEY in params else None,
            fields=fields,
            converters=list(compiler.get_converters(columns).items()),
        )
    return kept[build]


def run(build: Callable[[], models.QuerySet[M]], key: object = None) -> list[M]:
    """The rows of build()'s query, with `key` in the place of KEY, as the ORM would make
    them (its converters applied: JSON decoded, times made aware). build() selects a
    model's own columns only (no values(), no select_related)."""
    query = _compile(build)
    params = list(query.params)
    if query.key_at is not None:
        params[query.key_at] = key
    with statement_cursor() as cursor:  # prepared once per connection on PostgreSQL
        cursor.execute(query.sql, params)
        rows = cursor.fetchall()
    made = []
    for row in rows:
        values = list(row)
        for position, (converters, expression) in query.converters:
            for converter in converters:
                values[position] = converter(values[position], expression, connection)
        made.append(query.model.from_db(connection.alias, query.fields, values))
    return made
