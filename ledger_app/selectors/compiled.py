"""The reads every refund makes (the live webhook endpoints and its charge under lock;
through the API also the key and its limits), compiled to SQL by Django's ORM once per
connection, then run straight through a cursor: the same SQL and the same model
instances, without building and compiling the query again each time (about a
millisecond of Python per refund, some of it inside the charge's lock). Anything else
reads through the ORM as usual."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from ledger_app.db import statement_cursor

M = TypeVar("M", bound=models.Model)


def key(n: int, kind: type = str) -> Any:
    """Stands for run()'s n-th key while a query is compiled (a text, a whole number or an
    aware time, as the field it is compared with takes), and is replaced by it after."""
    if kind is str:
        return f"\x00compiled-key-{n}\x00"
    if kind is int:
        return -(2**60) - n  # no amount, count or id is ever this
    if kind is datetime:
        return datetime(1, 1, 1, 0, 0, n, 1, tzinfo=UTC)
    raise TypeError(f"a compiled query's key is a str, an int or a datetime, not {kind}")


# The first key, a text (a primary key, a prefix): what most compiled queries take.
KEY: Any = key(0)


def _adapter(kind: type) -> Callable[[Any], Any]:
    """How a key of this kind becomes a parameter, as the ORM made its stand-in one."""
    if kind is datetime:
        return lambda value: connection.ops.adapt_datetimefield_value(value)
    return lambda value: value


@dataclass(frozen=True)
class _Compiled(Generic[M]):
    model: type[M]
    sql: str
    params: tuple[Any, ...]
    keys_at: tuple[tuple[int, int, Callable[[Any], Any]], ...]  # (param, key, adapter)
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
        stand_ins = {
            _adapter(kind)(key(n, kind)): (n, _adapter(kind))
            for n in range(8)
            for kind in (str, int, datetime)
        }
        keys_at = tuple(
            (at, *stand_ins[param])
            for at, param in enumerate(params)
            if isinstance(param, str | int | datetime) and param in stand_ins
        )
        kept[build] = _Compiled(
            model=queryset.model,
            sql=sql,
            params=tuple(params),
            keys_at=keys_at,
            fields=fields,
            converters=list(compiler.get_converters(columns).items()),
        )
    return kept[build]


def run(build: Callable[[], models.QuerySet[M]], *keys: object) -> list[M]:
    """The rows of build()'s query, with each key in the place of its stand-in (`key(n)`,
    KEY for the first), as the ORM would make them (its converters applied: JSON decoded,
    times made aware). build() selects a model's own columns only (no values(), no
    select_related)."""
    query = _compile(build)
    params = list(query.params)
    for at, n, adapt in query.keys_at:
        params[at] = adapt(keys[n])
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
