"""The reads every refund makes (the live webhook endpoints and its charge under lock;
through the API also the key and its limits), compiled to SQL by Django's ORM once per
connection, then run straight through a cursor: the same SQL and the same model
instances, without building and compiling the query again each time (about a
millisecond of Python per refund, some of it inside the charge's lock). Anything else
reads through the ORM as usual."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.sql import UpdateQuery

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
        kept[build] = _Compiled(
            model=queryset.model,
            sql=sql,
            params=tuple(params),
            keys_at=_keys_at(params),
            fields=fields,
            converters=list(compiler.get_converters(columns).items()),
        )
    return kept[build]


def _keys_at(params: Sequence[Any]) -> tuple[tuple[int, int, Callable[[Any], Any]], ...]:
    """Where each key's stand-in is among a compiled query's parameters: (place, key,
    how the key becomes a parameter)."""
    stand_ins = {
        _adapter(kind)(key(n, kind)): (n, _adapter(kind))
        for n in range(8)
        for kind in (str, int, datetime)
    }
    return tuple(
        (at, *stand_ins[param])
        for at, param in enumerate(params)
        if isinstance(param, str | int | datetime) and param in stand_ins
    )


def _with_keys(
    params: tuple[Any, ...], keys_at: Sequence[tuple[int, int, Any]], keys: Sequence[object]
) -> list[Any]:
    given = list(params)
    for at, n, adapt in keys_at:
        given[at] = adapt(keys[n])
    return given


@dataclass(frozen=True)
class Update(Generic[M]):
    """An UPDATE to compile: the rows `queryset` selects are given `values` (as
    QuerySet.update takes them: F() expressions too)."""

    queryset: models.QuerySet[M]
    values: dict[str, Any]


def update(build: Callable[[], Update[Any]], *keys: object) -> int:
    """How many rows build()'s UPDATE changed, with each key in its stand-in's place: the
    SQL QuerySet.update would send, compiled once per connection, run as a prepared
    statement on PostgreSQL."""
    own = connections[DEFAULT_DB_ALIAS]
    kept: dict[Any, Any] = own.__dict__.setdefault("_compiled_queries", {})
    if build not in kept:
        made = build()
        query = cast(UpdateQuery, made.queryset.query.chain(UpdateQuery))
        query.add_update_values(made.values)
        sql, params = query.get_compiler(connection=connection).as_sql()
        kept[build] = (sql, tuple(params), _keys_at(params))
    sql, params, keys_at = kept[build]
    with statement_cursor() as cursor:
        cursor.execute(sql, _with_keys(params, keys_at, keys))
        return int(cursor.rowcount)


def run(build: Callable[[], models.QuerySet[M]], *keys: object) -> list[M]:
    """The rows of build()'s query, with each key in the place of its stand-in (`key(n)`,
    KEY for the first), as the ORM would make them (its converters applied: JSON decoded,
    times made aware). build() selects a model's own columns only (no values(), no
    select_related)."""
    query = _compile(build)
    with statement_cursor() as cursor:  # prepared once per connection on PostgreSQL
        cursor.execute(query.sql, _with_keys(query.params, query.keys_at, keys))
        rows = cursor.fetchall()
    made = []
    for row in rows:
        values = list(row)
        for position, (converters, expression) in query.converters:
            for converter in converters:
                values[position] = converter(values[position], expression, connection)
        made.append(query.model.from_db(connection.alias, query.fields, values))
    return made
