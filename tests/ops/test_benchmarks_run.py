"""The benchmarks cannot rot: their raw SQL takes its column lists from the models
(tests/bench/columns.py), and `make test` runs each benchmark script at a tiny size on
PostgreSQL, so a migration that breaks one fails here rather than on the next quiet run
(a NOT NULL column once stopped `make bench` at its first load, and nothing noticed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import AutoField, BigAutoField

from tests.processes import ROOT

BENCH = ROOT / "tests" / "bench"
sys.path.insert(0, str(BENCH))
import columns  # noqa: E402 - the bench's own module, as its scripts import it


def server_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/postgres"


class TestColumnsFromTheModels:
    def test_every_column_of_every_loaded_table_is_written_or_left_to_its_default(self):
        for label in columns.TABLES:
            model = apps.get_model(label)
            numbered = isinstance(model._meta.pk, AutoField | BigAutoField)  # by a sequence
            wanted = [
                f.column for f in model._meta.concrete_fields if not (f.primary_key and numbered)
            ]
            assert columns.names(label) == wanted, label

    def test_a_loader_that_leaves_out_a_column_with_no_default_is_stopped(self):
        with pytest.raises(ValueError, match="ledger_app.Charge.amount has no default"):
            columns.insert("ledger_app.Charge", {"id": "'ch_1'"}, "")

    def test_a_column_the_model_does_not_have_is_stopped(self):
        with pytest.raises(ValueError, match="has no column nonsense"):
            columns.insert(
                "ledger_app.Charge",
                {"id": "'ch_1'", "amount": "1", "currency": "'usd'", "nonsense": "1"},
                "",
            )

    def test_left_out_columns_get_what_django_would_write(self):
        statement = columns.insert_values(
            "ledger_app.Refund",
            {"id": "'re_1'", "charge_id": "'ch_1'", "amount": "1", "currency": "'usd'"},
        )
        head, values = statement.split("VALUES", 1)
        named = dict(
            zip(
                head.split("(", 1)[1].rsplit(")", 1)[0].split(", "),
                values.strip()[1:-1].split(", "),
                strict=True,
            )
        )
        assert named["status"] == "'pending'"
        assert named["metadata"] == "'{}'::jsonb"
        assert named["created_at"] == named["updated_at"] == "now()"
        assert named["handled_at"] == "NULL"
        assert named["note"] == "''"
        assert "payment_intent" not in named  # db_default: left to the database


@pytest.mark.postgres
@pytest.mark.parametrize(
    "script",
    [
        ["admin_changelists.py", "--rows", "500"],
        ["restore_drill.py", "--refunds", "500"],
        ["year.py", "--refunds", "500"],  # make bench-year
    ],
    ids=["admin_changelists", "restore_drill", "year"],
)
def test_the_bench_scripts_run_on_postgresql(script):
    done = subprocess.run(  # our own interpreter and script
        [sys.executable, str(BENCH / script[0]), *script[1:], "--url", server_url()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # A database of this run's own where the script names one by BENCH_DB_SUFFIX.
        env={**os.environ, "BENCH_DB_SUFFIX": f"_test_{os.getpid()}"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
