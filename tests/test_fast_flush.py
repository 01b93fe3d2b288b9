"""The flush between transactional tests (tests/fast_flush.py: DELETE, and TRUNCATE only of
the tables with a trigger of their own) leaves what Django's own TRUNCATE of every table
leaves: every table empty, every sequence where it was."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management.color import no_style
from django.db import connection

from ledger_app.access.api_keys import create_api_key
from ledger_app.events.endpoints import new_secret
from ledger_app.events.models import WebhookEndpoint
from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests import fast_flush
from tests.factories import ChargeFactory

# Committed rows, as a transactional test leaves them: inside a test's transaction the
# deferred foreign-key checks are still pending, and PostgreSQL refuses a TRUNCATE.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def tables() -> list[str]:
    return connection.introspection.django_table_names(only_existing=True, include_views=False)


def rows() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in tables():
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")  # noqa: S608 - Django's own table names
            counts[table] = cursor.fetchone()[0]
    return counts


def sequences() -> dict[str, int | None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sequencename, last_value FROM pg_sequences")
        return dict(cursor.fetchall())


def fill() -> None:
    """Rows in the tables a test writes most: a refund with its charge, ledger entries,
    events and deliveries, an API key, a user in a group."""
    WebhookEndpoint.objects.create(
        url="https://example.com/hook", enabled_events=["*"], secret=new_secret()
    )
    charge = ChargeFactory(amount=5_000)
    create_refund(RefundRequest(charge_id=charge.pk, amount=1_000, reason=Refund.Reason.DUPLICATE))
    create_api_key(name="flush test")
    User.objects.create_user("flushed").groups.add(Group.objects.create(name="Flushed"))


def test_every_table_is_named_once():
    statements = connection.ops.sql_flush(no_style(), tables())
    quoted = [connection.ops.quote_name(table) for table in tables()]

    assert statements != fast_flush._truncate_flush(connection.ops, no_style(), tables())
    for name in quoted:
        assert sum(" " + name in statement for statement in statements) == 1, name


@pytest.mark.parametrize("flush", ["fast", "django's own"])
def test_the_fast_flush_leaves_what_django_leaves(flush, settings):
    settings.REFUND_DISPATCH = "worker"  # nothing sent: the rows are the database's alone
    fill()
    filled = {table for table, count in rows().items() if count}
    counted = sequences()
    style = no_style()
    statements = (
        connection.ops.sql_flush(style, tables())
        if flush == "fast"
        else fast_flush._truncate_flush(connection.ops, style, tables())
    )

    connection.ops.execute_sql_flush(statements)

    assert {
        "ledger_app_charge",
        "ledger_app_refund",
        "ledger_app_ledgerentry",
        "ledger_app_event",
        "ledger_app_webhookdelivery",
        "ledger_app_apikey",
        "auth_user_groups",
    } <= filled
    assert set(rows().values()) == {0}
    assert sequences() == counted  # neither restarts a sequence
