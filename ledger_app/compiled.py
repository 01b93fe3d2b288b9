"""`precompiled`: an ordinary queryset, built and compiled to SQL by Django's ORM once per
connection, then run again with each call's values through a prepared statement.

The few queries every refund runs (its charge's lock, the live webhook endpoints, the
key's record, the repeat check; through the API also the key and its limits; a send's
lease) cost about a millisecond of Python each time the ORM builds and compiles them,
some of it inside the charge's row lock. Decorating the function that builds the
queryset keeps the queryset as the code to read and the ORM as the one that writes the
SQL; only the building is skipped:

    @precompiled
    def locked_charge(pk: str) -> QuerySet[Charge]:
        return Charge.objects.select_for_update().filter(pk=pk)

    locked_charge(pk)        # list[Charge], as list(Charge.objects...) gives them
    locked_charge.plain(pk)  # the same through the ORM, for tests and comparisons

The first call on a connection builds the queryset with a stand-in for each parameter
(annotated str, int or datetime), compiles it, and notes where each stand-in landed among
the SQL's parameters; later calls put their values there. A factory uses its parameters
only as values to compare with, and returns its model's own rows (no values(), no
select_related) or an `Update` of them (the count of rows changed, as QuerySet.update).
A stand-in the ORM changed on the way (`__contains`, `__in`), or an argument also used
changed (the query is built twice, with other stand-ins, and only their places may
differ), is refused at the first call; None as an argument at any call.
tests/test_precompiled.py checks that each gives what the plain ORM gives, locks included.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import UpdateQuery
from django.db.transaction import TransactionManagementError

from ledger_app.db import statement_cursor

M = TypeVar("M", bound=models.Model)
P = ParamSpec("P")
R = TypeVar("R")

# A parameter's stand-in while the query is compiled, by the kind of its annotation: no
# id, amount, count or time a call passes is ever one of these.
_KINDS: dict[object, type] = {"str": str, str: str, "int": int, int: int}
_KINDS.update({"datetime": datetime, datetime: datetime})


def _stand_in(n: int, kind: type) -> Any:
    if kind is str:
        return f"\x00precompiled-{n}\x00"
    if kind is int:
        return -(2**60) - n
    return datetime(1, 1, 1, 0, 0, n, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Update(Generic[M]):
    """What a precompiled factory returns for an UPDATE: the rows `queryset` selects get
    `values` (as QuerySet.update takes them, F() expressions too)."""

    queryset: models.QuerySet[M]
    values: dict[str, Any]


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    # (where among params, which call argument, how it becomes that parameter)
    places: tuple[tuple[int, int, Callable[[Any], Any]], ...]
    locks: bool  # SELECT ... FOR UPDATE: only inside a transaction, as the ORM insists
    model: type[models.Model] | None = None  # None: an Update
    fields: list[str] = field(default_factory=list)
    converters: list[tuple[int, tuple[list[Any], Any]]] = field(default_factory=list)


class Precompiled(Generic[P, R]):
    """A queryset factory called as its rows (or its Update's count), its SQL compiled
    once per connection (`precompiled`)."""

    def __init__(self, factory: Callable[P, Any]) -> None:
        self.factory = factory
        self.kinds = _kinds(factory)
        functools.update_wrapper(self, factory)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        # On the thread's own connection object (`connection` is a proxy every thread
        # shares): the SQL differs between databases, FOR UPDATE above all, and the ORM's
        # converters belong to the connection.
        own = connections[DEFAULT_DB_ALIAS]
        kept: dict[Precompiled[Any, Any], _Compiled] = own.__dict__.setdefault("_precompiled", {})
        query = kept.get(self) or kept.setdefault(self, self._compile(own))
        if query.locks and own.get_autocommit():
            raise TransactionManagementError("a row is locked inside a transaction")
        values = self._arguments(args, kwargs) if kwargs or len(args) != len(self.kinds) else args
        if None in values:  # the ORM writes IS NULL for it; a compiled `= NULL` matches nothing
            raise TypeError(f"{self.factory.__qualname__}: None is no value to compare with")
        params = list(query.params)
        for at, n, adapt in query.places:
            params[at] = adapt(values[n])
        with statement_cursor() as cursor:  # prepared once per connection on PostgreSQL
            cursor.execute(query.sql, params)
            if query.model is None:
                return cast(R, int(cursor.rowcount))
            return cast(R, _instances(query, cursor.fetchall(), own))

    def plain(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """What a call gives, through the ORM as usual (built, compiled and run now)."""
        made = self.factory(*args, **kwargs)
        if isinstance(made, Update):
            return cast(R, made.queryset.update(**made.values))
        return cast(R, list(made))

    def _arguments(self, args: Sequence[object], kwargs: dict[str, object]) -> tuple[Any, ...]:
        bound = inspect.signature(self.factory).bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _compile(self, own: BaseDatabaseWrapper) -> _Compiled:
        made, sql, params, compiler = self._built(own, first=0)
        if isinstance(made, Update):
            found = self._found(sql, params, own, locks=False)
        else:
            columns = [column for column, _, _ in compiler.select]
            fields = [f.attname for f in made.model._meta.concrete_fields]
            if [getattr(getattr(c, "target", None), "attname", None) for c in columns] != fields:
                raise TypeError(f"{self.factory.__qualname__} selects its model's own columns only")
            locks = made.query.select_for_update and own.features.has_select_for_update
            found = replace(
                self._found(sql, params, own, locks=locks),
                model=made.model,
                fields=fields,
                converters=list(compiler.get_converters(columns).items()),
            )
        # Built again with other stand-ins: only the places may differ. An argument also
        # used changed (`x__startswith=pk`, `amount * 2`) would otherwise keep its first
        # stand-in for good.
        _, again, again_params, _ = self._built(own, first=len(self.kinds))
        if again != sql or not _only_places_differ(params, again_params, found.places):
            raise TypeError(
                f"{self.factory.__qualname__}: an argument reaches the SQL changed (a "
                "precompiled factory compares its parameters, unchanged)"
            )
        return found

    def _built(self, own: BaseDatabaseWrapper, *, first: int) -> tuple[Any, str, Any, Any]:
        """The factory's queryset (or Update) made with stand-ins numbered from `first`,
        its SQL, parameters and compiler."""
        stand_ins = [_stand_in(first + n, kind) for n, kind in enumerate(self.kinds)]
        made = cast(Callable[..., Any], self.factory)(*stand_ins)
        if isinstance(made, Update):
            query = cast(UpdateQuery, made.queryset.query.chain(UpdateQuery))
            query.add_update_values(made.values)
            query.clear_select_clause()  # as QuerySet.update does
            compiler = query.get_compiler(connection=own)
            return (made, *compiler.as_sql(), compiler)
        if not isinstance(made, models.QuerySet) or made.db != own.alias:
            raise TypeError(f"{self.factory.__qualname__} returns a default database's queryset")
        compiler = made.query.get_compiler(connection=own)
        return (made, *compiler.as_sql(), compiler)  # a lock outside a transaction: refused

    def _found(
        self, sql: str, params: Sequence[Any], own: BaseDatabaseWrapper, *, locks: bool
    ) -> _Compiled:
        """The compiled query, with where each argument's stand-in landed among `params`."""
        adapt = [_adapter(kind, own) for kind in self.kinds]
        marks = [adapt[n](_stand_in(n, kind)) for n, kind in enumerate(self.kinds)]
        places = tuple(
            # psycopg's own int types (Int8 ...) as the ORM chose them for the column
            (at, n, adapt[n] if type(param) is type(mark) else type(param))
            for at, param in enumerate(params)
            for n, mark in enumerate(marks)
            if isinstance(param, type(mark)) and not isinstance(param, bool) and param == mark
        )
        if missing := set(range(len(self.kinds))) - {n for _, n, _ in places}:
            raise TypeError(
                f"{self.factory.__qualname__}: arguments {sorted(missing)} do not reach the "
                "SQL as values (a precompiled factory compares its parameters, unchanged)"
            )
        return _Compiled(sql, tuple(params), places, locks)


@overload
def precompiled(factory: Callable[P, models.QuerySet[M]]) -> Precompiled[P, list[M]]: ...
@overload
def precompiled(factory: Callable[P, Update[M]]) -> Precompiled[P, int]: ...
def precompiled(factory: Callable[P, Any]) -> Precompiled[P, Any]:
    """The factory's queryset compiled once per connection and run with each call's values
    (the module's docstring says how, and when it may be used)."""
    return Precompiled(factory)


def _only_places_differ(
    params: Sequence[Any], again: Sequence[Any], places: tuple[tuple[int, int, Any], ...]
) -> bool:
    """Two compilations' parameters differ only where the arguments' stand-ins went."""
    if len(params) != len(again):
        return False
    differ = {at for at, (one, other) in enumerate(zip(params, again, strict=True)) if one != other}
    return differ <= {at for at, _, _ in places}


def _kinds(factory: Callable[..., Any]) -> tuple[type, ...]:
    kinds = []
    for name, parameter in inspect.signature(factory).parameters.items():
        kind = _KINDS.get(parameter.annotation)
        if kind is None or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"{factory.__qualname__}: {name} must be annotated str, int or datetime"
            )
        kinds.append(kind)
    return tuple(kinds)


def _adapter(kind: type, own: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """How an argument of this kind becomes a parameter, as the ORM makes one of a field."""
    if kind is datetime:
        return cast(Callable[[Any], Any], own.ops.adapt_datetimefield_value)
    return _same


def _same(value: Any) -> Any:
    return value


def _instances(
    query: _Compiled, rows: Sequence[Sequence[Any]], own: BaseDatabaseWrapper
) -> list[Any]:
    """The rows as the ORM makes them: its converters applied (JSON decoded, times made
    aware), each a saved instance."""
    model = cast(type[models.Model], query.model)
    made = []
    for row in rows:
        values = list(row)
        for position, (converters, expression) in query.converters:
            for converter in converters:
                values[position] = converter(values[position], expression, own)
        made.append(model.from_db(own.alias, query.fields, values))
    return made
