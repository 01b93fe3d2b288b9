"""scripts/backup-check, the restore drill, run as the operator runs it: a real process
against the test database, which it dumps, restores into a copy of its own, checks and drops."""

import os
import re
import runpy
import subprocess
import sys

import pytest
from django.db import connection

from ledger_app.models import Charge, Event, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests import processes
from tests.factories import ChargeFactory
from tests.processes import ROOT

SCRIPT = ROOT / "scripts" / "backup-check"
SUMMARY = re.compile(r"^backup-check: (OK|FAILED);.*$", re.MULTILINE)
ROWS = re.compile(r"rows ((?:\w+=\d+ ?)+)")
RESTORED = re.compile(r"restored into (restore_check_\w+) \((\w[\w ]*)")


def backup_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": processes.test_database_url(), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def summary_of(done: subprocess.CompletedProcess) -> str:
    found = SUMMARY.search(done.stdout)
    assert found, done.stdout + done.stderr
    return found.group(0)


def restored(summary: str) -> tuple[str, str]:
    """The copy's database name and what became of it."""
    found = RESTORED.search(summary)
    assert found, summary
    name, state = found.groups()
    return name, state


def counts_in(summary: str) -> dict[str, int]:
    found = ROWS.search(summary)
    assert found, summary
    pairs = found.group(1).split()
    return {name: int(value) for name, value in (pair.split("=") for pair in pairs)}


def database_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return cursor.fetchone() is not None


@pytest.fixture
def refunded_ledger(worker_dispatch):
    """Two charges and three committed refunds (two keyed), left pending for a worker so
    nothing moves while the drill dumps."""
    first, second = ChargeFactory(amount=5_000), ChargeFactory(amount=2_000, currency="jpy")
    create_refund(RefundRequest(charge_id=first.pk, amount=1_200, idempotency_key="drill-1"))
    create_refund(RefundRequest(charge_id=first.pk, amount=300))
    create_refund(RefundRequest(charge_id=second.pk, idempotency_key="drill-2"))
    return [first, second]


def ledger_counts() -> dict[str, int]:
    return {
        "charges": Charge.objects.count(),
        "refunds": Refund.objects.count(),
        "ledger_entries": LedgerEntry.objects.count(),
        "idempotency_records": IdempotencyRecord.objects.count(),
        "events": Event.objects.count(),
    }


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestRestoreDrill:
    def test_restores_a_copy_that_verifies_with_the_same_rows_and_drops_it(self, refunded_ledger):
        made = ledger_counts()

        done = backup_check()

        summary = summary_of(done)
        assert done.returncode == 0, done.stdout + done.stderr
        assert summary.startswith("backup-check: OK;")
        assert counts_in(summary) == made
        assert made["charges"] == 2 and made["refunds"] == 3 and made["idempotency_records"] == 2
        for step in ("dump", "restore", "verify", "migrations"):
            assert re.search(rf"\b{step} \d+\.\ds", summary), step
        name, state = restored(summary)
        assert state == "dropped"
        assert not database_exists(name)

    @pytest.mark.allows_drift
    def test_a_backup_of_drifted_books_fails_the_drill(self, refunded_ledger):
        charge = refunded_ledger[0]
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE ledger_app_charge SET amount_refunded = amount_refunded + 1 WHERE id = %s",
                [charge.pk],
            )

        done = backup_check()

        summary = summary_of(done)
        assert done.returncode == 1
        assert summary.startswith("backup-check: FAILED;")
        assert "verify_ledger: 1 drift found" in summary
        assert f"{charge.pk}: amount_refunded_drift" in summary
        assert "verify_ledger" in done.stderr
        name, state = restored(summary)
        assert state == "dropped"
        assert not database_exists(name)

    def test_a_backup_missing_a_migration_fails_the_drill(self, refunded_ledger):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, app, name, applied FROM django_migrations WHERE app = 'ledger_app' "
                "ORDER BY name DESC LIMIT 1"
            )
            latest = cursor.fetchone()
            cursor.execute("DELETE FROM django_migrations WHERE id = %s", [latest[0]])
        try:
            done = backup_check()
        finally:
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO django_migrations (id, app, name, applied) "
                    "VALUES (%s, %s, %s, %s)",
                    latest,
                )

        summary = summary_of(done)
        assert done.returncode == 1
        assert f"1 migrations not applied in the copy: ledger_app.{latest[2]}" in summary
        assert not database_exists(restored(summary)[0])

    def test_a_kept_dump_restores_on_another_server_as_a_production_backup(
        self, refunded_ledger, tmp_path
    ):
        dump = tmp_path / "ledger.dump"
        made = ledger_counts()
        assert backup_check(f"--keep-dump={dump}").returncode == 0
        create_refund(
            RefundRequest(charge_id=refunded_ledger[0].pk, amount=1)
        )  # after the dump: not in it

        server = processes.test_database_url().rsplit("/", 1)[0] + "/postgres"
        done = backup_check(f"--from-dump={dump}", f"--restore-server={server}")

        summary = summary_of(done)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "dump given" in summary and "equal to ledger.dump.counts.json" in summary
        assert counts_in(summary) == made
        assert dump.is_file()
        assert not database_exists(restored(summary)[0])

    def test_the_temporary_dump_is_deleted(self, refunded_ledger, tmp_path):
        done = backup_check(f"--dump-dir={tmp_path}", "--json")

        assert done.returncode == 0, done.stdout + done.stderr
        assert list(tmp_path.iterdir()) == []


def test_counts_the_models_own_tables():
    tables = runpy.run_path(str(SCRIPT))["LEDGER_TABLES"]  # not as __main__: nothing runs

    assert tables == {
        "charges": Charge._meta.db_table,
        "refunds": Refund._meta.db_table,
        "ledger_entries": LedgerEntry._meta.db_table,
        "idempotency_records": IdempotencyRecord._meta.db_table,
        "events": Event._meta.db_table,
    }


@pytest.mark.parametrize(
    ("database_url", "said"),
    [(None, "DATABASE_URL is not set"), ("sqlite:///ledger.sqlite3", "not PostgreSQL")],
    ids=["none", "sqlite"],
)
def test_explains_and_exits_2_without_postgresql(database_url, said):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if database_url:
        env["DATABASE_URL"] = database_url

    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode == 2
    assert said in done.stderr and "restore drill" in done.stderr
