"""The statements every refund runs go through db.statement_cursor: bound on the server and
prepared once per connection on PostgreSQL, still seen by Django's query logging."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger_app.db import numbered, statement_cursor
from ledger_app.services.refunds import create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


def test_numbered_turns_each_placeholder_into_postgresqls_own():
    assert (
        numbered("INSERT INTO t (a, b) VALUES (%s, %s)") == "INSERT INTO t (a, b) VALUES ($1, $2)"
    )
    assert numbered("UPDATE t SET a = %s WHERE id = %s", 4) == "UPDATE t SET a = $4 WHERE id = $5"


@pytest.mark.parametrize("sql", ["SELECT 1 WHERE a LIKE '10%%'", "SELECT %(name)s", "SELECT '%'"])
def test_numbered_refuses_sql_with_any_other_percent_sign(sql):
    with pytest.raises(ValueError, match="only % are %s"):
        numbered(sql)


def test_its_statements_are_logged_like_any_other():
    with CaptureQueriesContext(connection) as queries, statement_cursor() as cursor:
        cursor.execute("SELECT %s + 1", [41])
        answer = cursor.fetchone()[0]

    assert answer == 42
    assert len(queries) == 1


@pytest.mark.postgres
def test_a_refunds_statements_are_prepared_after_a_few_refunds():
    charge = ChargeFactory(amount=100_000)

    for _ in range(7):
        create_refund(charge_id=charge.pk, amount=1, idempotency_key=uuid.uuid4().hex)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]

    # The key's claim, the charge's lock and the reserve's writes in one statement.
    assert any("INSERT INTO ledger_app_idempotencyrecord" in s for s in prepared), prepared
    assert any("FOR UPDATE" in s and "ledger_app_charge" in s for s in prepared), prepared
    assert any(s.startswith("WITH w0 AS (INSERT INTO") for s in prepared), prepared
