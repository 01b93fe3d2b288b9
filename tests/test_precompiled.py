"""`precompiled` (ledger_app/compiled.py) gives what the plain ORM gives for the same
queryset: the same rows field for field, the same SQL with the same parameters, the same
rows changed by an Update, and the same row lock (two connections, on PostgreSQL)."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.db.models import F, QuerySet
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from ledger_app.compiled import Update, precompiled
from ledger_app.db import is_lock_timeout
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, _locked_charge, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


def fields_of(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


@precompiled
def refunds_like(charge_id: str, amount: int, since: datetime) -> QuerySet[Refund]:
    return Refund.objects.filter(charge_id=charge_id, amount=amount, created_at__gte=since)


@precompiled
def add_to_note(pk: str, note: str) -> Update[Refund]:
    refund = Refund.objects.filter(pk=pk)
    return Update(refund, {"note": note, "dispatch_attempts": F("dispatch_attempts") + 1})


def refund(charge: Charge, amount: int, **fields) -> Refund:
    return create_refund(RefundRequest(charge_id=charge.pk, amount=amount, **fields)).item


def test_its_rows_are_the_orms_field_for_field():
    charge, other = ChargeFactory(amount=10_000), ChargeFactory(amount=10_000)
    for amount, metadata in [(300, {"order": "ünï"}), (300, {}), (500, {"a": "1"})]:
        refund(charge, amount, metadata=metadata, note="n")
    refund(other, 300)
    since = timezone.now() - timedelta(hours=1)

    for args in [(charge.pk, 300, since), (charge.pk, 500, since), (charge.pk, 700, since)]:
        rows, expected = refunds_like(*args), refunds_like.plain(*args)
        assert [fields_of(r) for r in rows] == [fields_of(r) for r in expected]
        assert all(type(r) is Refund and r._state.adding is False for r in rows)
    assert len(refunds_like(charge.pk, 300, since)) == 2
    assert refunds_like(charge.pk, 300, timezone.now() + timedelta(hours=1)) == []
    assert refunds_like(charge_id=charge.pk, amount=500, since=since)[0].metadata == {"a": "1"}


def test_its_sql_and_parameters_are_the_orms_for_the_same_values():
    charge = ChargeFactory()
    since = timezone.now()

    refunds_like(charge.pk, 300, since)

    # compiled.py keeps a connection's own in its __dict__
    compiled = vars(connections["default"])["_precompiled"][refunds_like]
    params = list(compiled.params)
    for at, n, adapt in compiled.places:
        params[at] = adapt((charge.pk, 300, since)[n])
    queryset = refunds_like.factory(charge.pk, 300, since)
    sql, orm_params = queryset.query.get_compiler(connection=connection).as_sql()
    assert compiled.sql == sql and params == list(orm_params)


def test_an_update_changes_what_the_orms_update_would():
    charge = ChargeFactory(amount=10_000)
    mine, theirs, untouched = (refund(charge, 100) for _ in range(3))
    before = {r.pk: Refund.objects.get(pk=r.pk) for r in (mine, theirs, untouched)}

    assert add_to_note(mine.pk, "noted") == add_to_note.plain(theirs.pk, "noted") == 1
    assert add_to_note("re_missing", "x") == add_to_note.plain("re_missing", "x") == 0

    changed = {"note", "dispatch_attempts"}
    now = {r.pk: Refund.objects.get(pk=r.pk) for r in (mine, theirs, untouched)}
    attempts = before[mine.pk].dispatch_attempts + 1
    assert (now[mine.pk].note, now[mine.pk].dispatch_attempts) == ("noted", attempts)
    assert {f: getattr(now[mine.pk], f) for f in changed} == {
        f: getattr(now[theirs.pk], f) for f in changed
    }
    assert fields_of(now[untouched.pk]) == fields_of(before[untouched.pk])
    kept = [f.attname for f in Refund._meta.concrete_fields if f.attname not in changed]
    assert [getattr(now[mine.pk], f) for f in kept] == [getattr(before[mine.pk], f) for f in kept]


@pytest.mark.django_db(transaction=True)
def test_a_lock_outside_a_transaction_is_refused_as_the_orm_refuses_it():
    charge = ChargeFactory()
    with transaction.atomic():
        assert _locked_charge(charge.pk)[0].pk == charge.pk  # compiled now, in a transaction

    outcomes = []
    for take in (_locked_charge, _locked_charge.plain):
        try:
            outcomes.append(take(charge.pk) and "ran")
        except TransactionManagementError:
            outcomes.append("refused")
    # SQLite has no row locks: there the ORM leaves FOR UPDATE out, and runs it anyway.
    assert outcomes == ["refused" if connection.features.has_select_for_update else "ran"] * 2


def test_a_factory_it_cannot_stand_for_is_refused():
    with pytest.raises(TypeError, match="annotated str, int or datetime"):

        @precompiled
        def untyped(pk) -> QuerySet[Charge]:
            return Charge.objects.filter(pk=pk)

    @precompiled
    def containing(text: str) -> QuerySet[Charge]:
        return Charge.objects.filter(description__contains=text)  # the ORM wraps it in %

    @precompiled
    def values_only(pk: str) -> QuerySet[Charge, Any]:  # rows as dicts
        return Charge.objects.filter(pk=pk).values("pk")

    @precompiled
    def also_changed(pk: str) -> QuerySet[Charge]:  # pk plain, and pk turned into "pk%"
        return Charge.objects.filter(pk=pk, description__startswith=pk)

    @precompiled
    def read_now(pk: str) -> QuerySet[Charge]:  # now() would be frozen at the first call
        return Charge.objects.filter(pk=pk, created_at__lte=timezone.now())

    with pytest.raises(TypeError, match="do not reach the SQL"):
        containing("x")
    with pytest.raises(TypeError, match="own columns only"):
        values_only("ch_x")
    for changed in (also_changed, read_now):
        with pytest.raises(TypeError, match="reaches the SQL changed"):
            changed("ch_x")


def test_none_is_refused_where_the_orm_would_write_is_null():
    @precompiled
    def by_customer(customer: str) -> QuerySet[Charge]:
        return Charge.objects.filter(customer=customer)

    assert by_customer("cus_1") == by_customer.plain("cus_1") == []
    with pytest.raises(TypeError, match="None is no value"):
        by_customer(None)  # type: ignore[arg-type]  # what the check is for


# --- the lock, across two connections (PostgreSQL: SQLite locks the whole database) ----


@contextmanager
def held_in_another_connection(take: Callable[[str], list[Charge]], pk: str) -> Iterator[None]:
    """`take(pk)` in a transaction on another thread's connection, until the block ends."""
    taken, release, failed = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic():
                assert [c.pk for c in take(pk)] == [pk]
                taken.set()
                release.wait(30)
        except BaseException as exc:  # the test names it below
            failed.append(exc)
            taken.set()
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(30) and not failed, failed
        yield
    finally:
        release.set()
        holder.join(30)
    assert not failed, failed


def waits_for(take: Callable[[str], list[Charge]], pk: str) -> bool:
    """Whether `take(pk)` here had to wait for another transaction's lock (given 200 ms)."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            take(pk)
    except OperationalError as exc:
        if not is_lock_timeout(exc):
            raise
        return True
    return False


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # two real connections
@pytest.mark.parametrize("holder", ["precompiled", "orm"])
def test_the_refunds_charge_lock_is_the_orms_row_lock(holder):
    """The refund service's charge lock (select_for_update, precompiled) holds the row
    against the plain ORM's lock and the other way round; other rows stay free."""
    charge, other = ChargeFactory(), ChargeFactory()
    takes: dict[str, Callable[[str], list[Charge]]] = {
        "precompiled": _locked_charge,
        "orm": _locked_charge.plain,
    }

    with held_in_another_connection(takes[holder], charge.pk):
        assert waits_for(_locked_charge, charge.pk)
        assert waits_for(_locked_charge.plain, charge.pk)
        assert not waits_for(_locked_charge, other.pk)
        assert not waits_for(_locked_charge.plain, other.pk)
    assert not waits_for(_locked_charge, charge.pk)  # released with the other's commit
