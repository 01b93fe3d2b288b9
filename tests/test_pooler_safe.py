"""Behind a pooler in transaction mode (DATABASE_TRANSACTION_POOLER) nothing may live in a
PostgreSQL session across transactions: no WITH HOLD cursor, no prepared statement, no
session option, no session advisory lock. What the code promises here; `make test-ha`
runs the API, admin and command tests through PgBouncer, which resets every server
connection after each transaction, to show it holds."""

from __future__ import annotations

import ast
import json
import re
from unittest import mock
from urllib.parse import urlencode

import psycopg
import pytest
from django.db import DatabaseError, InternalError, OperationalError, ProgrammingError, connection
from django.test import Client

from ledger_app.access.api_keys import create_api_key
from ledger_app.db import connection_lost, streamed
from ledger_app.models import Charge, Refund
from tests.factories import ChargeFactory
from tests.processes import manage_alone
from tests.source_tree import application_modules


def calls_of(tree: ast.Module, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    ]


def test_every_iterator_is_streamed_inside_a_transaction():
    """QuerySet.iterator() outside a transaction declares a WITH HOLD cursor on PostgreSQL and
    fetches from it in later statements: only db.streamed may call it, inside its own."""
    callers = sorted(
        str(path) for path, tree in application_modules().items() if calls_of(tree, "iterator")
    )
    assert callers == ["ledger_app/db.py"]


# SQL's SET (the code writes SQL's words in capitals), not SET LOCAL.
SESSION_SET = re.compile(r"\s*SET\s+(SESSION\s+)?(?!LOCAL\b)[A-Za-z_.]+\s*(TO|=)", re.IGNORECASE)


def test_no_session_advisory_lock_and_no_session_set():
    """Locks and settings last one transaction (pg_advisory_xact_lock, set_config(..., true)),
    never the session a pooler would hand to someone else."""
    found = []
    for path, tree in application_modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = " ".join(node.value.lower().split())
                if "pg_advisory_lock" in text or "pg_try_advisory_lock" in text:
                    found.append(f"{path}: {node.value}")
                if SESSION_SET.match(node.value) and node.value.lstrip()[:3] == "SET":
                    found.append(f"{path}: {node.value}")
                if "set_config(" in text and ", true)" not in text:
                    found.append(f"{path}: {node.value}")
    assert found == []


@pytest.mark.django_db(transaction=True)
def test_streamed_reads_every_row_in_order_inside_a_transaction_of_its_own(settings):
    settings.DATABASE_TRANSACTION_POOLER = True
    made = [ChargeFactory().pk for _ in range(5)]
    seen_in_atomic = []

    def rows():
        for pk in streamed(Charge.objects.order_by("pk").values_list("pk", flat=True), 2):
            seen_in_atomic.append(connection.in_atomic_block)
            yield pk

    assert list(rows()) == sorted(made)
    assert seen_in_atomic == [True] * 5
    assert not connection.in_atomic_block  # and closed when the rows are done


def open_cursors() -> list[bool]:
    """This connection's open server-side cursors: is each WITH HOLD?"""
    with connection.cursor() as cursor:
        cursor.execute("SELECT is_holdable FROM pg_cursors")
        return [holdable for (holdable,) in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_streamed_keeps_its_cursor_inside_the_transaction_behind_a_pooler(settings):
    for _ in range(3):
        ChargeFactory()
    queryset = Charge.objects.values_list("pk", flat=True)

    settings.DATABASE_TRANSACTION_POOLER = True
    rows = streamed(queryset, 2)
    next(rows)
    assert open_cursors() == [False]  # declared in the transaction, not WITH HOLD
    rows.close()
    assert not connection.in_atomic_block  # closed: the transaction ended with it

    settings.DATABASE_TRANSACTION_POOLER = False  # straight to PostgreSQL: no transaction
    plain = streamed(queryset, 2)
    next(plain)
    assert open_cursors() == [True]  # WITH HOLD, as Django makes it in autocommit
    plain.close()


SETTINGS = (
    "import json; from django.conf import settings;"
    "print(json.dumps(sorted(settings.DATABASES['default']['OPTIONS'])))"
)


@pytest.mark.parametrize(
    ("pooler", "options"),
    [
        ("true", ["connect_timeout"]),
        ("false", ["connect_timeout", "options", "prepare_threshold"]),
    ],
)
def test_behind_a_pooler_no_session_option_and_no_prepared_statement(pooler, options):
    """As production loads its settings: behind the pooler no `options` (lock_timeout) at
    connect and no prepare_threshold, even with DATABASE_PREPARED_STATEMENTS on."""
    done = manage_alone(
        "shell",
        "-c",
        SETTINGS,
        env={
            "DJANGO_SECRET_KEY": "pooler-settings-test-key-" + "x" * 40,
            "DJANGO_DOTENV": "false",
            "DATABASE_URL": "postgres://app@127.0.0.1:6432/backoffice",
            "DATABASE_TRANSACTION_POOLER": pooler,
            "DATABASE_PREPARED_STATEMENTS": "true",
        },
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == options


def lost(django_error: type[DatabaseError], cause: Exception) -> DatabaseError:
    """A Django database error as Django raises it: psycopg's own as its cause."""
    error = django_error(str(cause))
    error.__cause__ = cause
    return error


def test_a_connection_that_lost_track_of_the_conversation_is_lost_not_a_bad_statement():
    """psycopg raises InternalError itself (no SQLSTATE) when the replies stop making
    sense, as when PgBouncer's server connection dies mid-command; the server's own
    internal error (XX000) and a refused statement are not the connection's."""
    confused = psycopg.InternalError("received 2 results from command 'BEGIN'")
    assert connection_lost(lost(InternalError, confused))
    assert connection_lost(lost(OperationalError, psycopg.OperationalError("closed")))
    assert not connection_lost(lost(InternalError, psycopg.errors.InternalError_("XX000")))
    assert not connection_lost(lost(ProgrammingError, psycopg.errors.UndefinedTable("no")))


@pytest.mark.django_db(transaction=True)
def test_a_refund_whose_connection_loses_track_answers_503_and_its_retry_refunds_once(
    inline_dispatch,
):
    charge = ChargeFactory(amount=1_000)
    client = Client()
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {create_api_key(name='pooler')[1]}"
    confused = lost(InternalError, psycopg.InternalError("received 2 results from command"))

    def ask():
        return client.post(
            "/v1/refunds",
            urlencode({"charge": charge.pk, "amount": 400}),
            content_type="application/x-www-form-urlencoded",
            HTTP_IDEMPOTENCY_KEY="pooler-cut",
        )

    with mock.patch("ledger_app.idempotency.services.claim", side_effect=confused):
        first = ask()
    assert first.status_code == 503
    assert first.json()["error"]["code"] == "database_unavailable"
    assert not Refund.objects.exists()

    again = ask()
    assert again.status_code == 200
    assert Refund.objects.filter(charge=charge).count() == 1
