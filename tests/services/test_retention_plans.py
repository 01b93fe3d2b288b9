"""Each batch of purge_expired selects by an index on PostgreSQL, never by reading a table
through: the plan of every table's batch SELECT on a loaded database, for the first batch
and for the next ones (from a cursor). docs/operating/retention.md shows these plans."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.operations import expiry
from tests.retention_rows import just_outside, load_backlog

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

# Every table a batch SELECT reads: the table walked and the tables its rule probes.
MAIN_TABLES = {
    "events": "ledger_app_event",
    "provider events": "ledger_app_providerevent",
    "keys": "ledger_app_idempotencyrecord",
    "rate counters": "ledger_app_ratecounter",
    "failed sign-in counts": "axes_accessattempt",
    "access logs": "axes_accesslog",
    "access failures": "axes_accessfailurelog",
    "requests": "simulated_provider_providerrequest",
}


@pytest.fixture(scope="module")
def loaded_database(django_db_setup, django_db_blocker):
    """20,000 events with as many deliveries, 5,000 charges, refunds and keys, 20,000 rows
    of every other kind; half of each past its retention. Loaded once for the module and
    emptied after it (the tests only read)."""
    with django_db_blocker.unblock():
        from django.db import transaction

        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            load_backlog(charges=5_000, old=just_outside(400), new=timezone.now())
            yield
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


def batch_plans(*, from_cursor: bool) -> dict[str, str]:
    """EXPLAIN of the SELECT each table's batch runs (expiry.batch_select), as a run
    would issue it now: the first batch, or a later one that starts from a cursor."""
    now = timezone.now()
    plans = {}
    for kind in expiry.KINDS.values():
        days = expiry.retention_days(kind.name)
        cutoff = now if days is None else now - timedelta(days=days)
        for table in kind.tables:
            expired = table.expired(now, cutoff)
            cursor = now - timedelta(days=401) if from_cursor else None  # before the old rows
            plans[table.plural] = expiry.batch_select(table, expired, cursor, 1000).explain()
    return plans


@pytest.mark.parametrize("from_cursor", [False, True], ids=["first batch", "later batches"])
def test_every_batch_select_walks_an_index_and_reads_no_table_through(loaded_database, from_cursor):
    plans = batch_plans(from_cursor=from_cursor)

    assert set(plans) == set(MAIN_TABLES)
    for name, plan in plans.items():
        assert "Seq Scan" not in plan, f"{name}:\n{plan}"
        walked = re.search(rf"Index (Only )?Scan using \S+ on {MAIN_TABLES[name]}\b", plan)
        assert walked, f"{name} is not walked by an index:\n{plan}"
        assert plan.startswith("Limit"), f"{name} is not a bounded batch:\n{plan}"


def test_the_check_would_see_a_table_read_through(loaded_database):
    """The assertion above is not blind: a select with no usable index is a Seq Scan."""
    from ledger_app.models import Event

    plan = Event.objects.filter(type__startswith="refund").order_by("data_object")[:1000].explain()

    assert "Seq Scan on ledger_app_event" in plan
