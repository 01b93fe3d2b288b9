"""The statements every refund runs go through db.statement_cursor: bound on the server and
prepared once per connection on PostgreSQL, still seen by Django's query logging."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger_app.db import numbered, statement_cursor
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.processes import manage_alone

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
        create_refund(
            RefundRequest(charge_id=charge.pk, amount=1, idempotency_key=uuid.uuid4().hex)
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]

    # The key's claim, the charge's lock and the reserve's writes in one statement.
    assert any("INSERT INTO ledger_app_idempotencyrecord" in s for s in prepared), prepared
    assert any("FOR UPDATE" in s and "ledger_app_charge" in s for s in prepared), prepared
    assert any(s.startswith("WITH w0 AS (INSERT INTO") for s in prepared), prepared


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # it opens a new connection
def test_with_preparing_turned_off_nothing_is_prepared():
    """What DATABASE_PREPARED_STATEMENTS=false sets (no prepare_threshold, below): the same
    refunds leave no prepared statement on the connection, for a pooler that would hand
    them to another session."""
    options = connection.settings_dict["OPTIONS"]
    threshold = options.pop("prepare_threshold", None)
    assert threshold == 5  # this pass runs with the default
    connection.close()
    try:
        charge = ChargeFactory(amount=100_000)
        for _ in range(7):
            create_refund(
                RefundRequest(charge_id=charge.pk, amount=1, idempotency_key=uuid.uuid4().hex)
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            assert cursor.fetchone()[0] == 0
    finally:
        options["prepare_threshold"] = threshold
        connection.close()  # the next test's connection prepares again


@pytest.mark.parametrize(("value", "threshold"), [(None, 5), ("false", None), ("true", 5)])
def test_database_prepared_statements_sets_the_threshold(tmp_path, value, threshold):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key-0123456789-abcdefghijklmnop",
        "DATABASE_URL": "postgres://root@127.0.0.1:5432/never-opened",
        **({"DATABASE_PREPARED_STATEMENTS": value} if value else {}),
    }

    result = manage_alone(
        "shell",
        "-c",
        "from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS'].get('prepare_threshold'))",
        env=env,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == str(threshold)
