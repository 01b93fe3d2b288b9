"""An operator who runs yesterday's refund file again under a new --batch-id refunds
nothing twice: every row is named repeat_of_earlier, with the batch it repeats, and the run
exits 1. Run as real manage.py processes, as the operator would; the money totals of the
summary tell refunded, reserved and declined money apart."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.models import Charge, Refund, RefundLimit
from tests.commands.bulk_runs import bulk, counts, report_rows, write_csv
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants
from tests.processes import run_command, start_command

QUICK = {"SIMULATED_GATEWAY_LATENCY_MS": "0", "REFUND_DISPATCH": "inline"}
YESTERDAY, TODAY = "2026-12-01-outage", "2026-12-02-outage"


def bulk_process(*args, **env):
    return run_command("bulk_refund", *map(str, args), timeout=120, env={**QUICK, **env})


def twenty_partial_refunds(tmp_path):
    charges = [ChargeFactory(amount=10_000) for _ in range(20)]
    file = write_csv(tmp_path / "outage.csv", [[c.pk, "2500", "duplicate", ""] for c in charges])
    return charges, file


def refunded(charges) -> list[int]:
    return list(
        Charge.objects.filter(pk__in=[c.pk for c in charges])
        .order_by("pk")
        .values_list("amount_refunded", flat=True)
    )


@pytest.mark.django_db(transaction=True)
class TestTheSameFileUnderANewBatchId:
    def test_is_named_refused_and_refunds_nothing_then_only_allow_repeats_refunds(self, tmp_path):
        charges, file = twenty_partial_refunds(tmp_path)
        first = bulk_process(file, "--batch-id", YESTERDAY)
        assert first.returncode == 0, first.stderr
        assert "20 refunded" in first.stdout and "refunded: usd $500.00" in first.stdout
        assert refunded(charges) == [2_500] * 20
        before = counts()

        dry = bulk_process(file, "--batch-id", TODAY, "--dry-run", "--report", tmp_path / "d.csv")
        real = bulk_process(file, "--batch-id", TODAY, "--report", tmp_path / "r.csv")

        for run, report in ((dry, "d.csv"), (real, "r.csv")):
            rows = report_rows(tmp_path / report)
            assert [r["outcome"] for r in rows] == ["repeat_of_earlier"] * 20, run.stdout
            assert {r["repeat_by"] for r in rows} == {f"batch {YESTERDAY}"}
            assert all(r["repeat_of"].startswith("re_") and not r["refund"] for r in rows)
            assert "20 repeat_of_earlier" in run.stdout
            assert "would_refund" not in run.stdout and "20 refunded" not in run.stdout
            assert f"repeats of batch {YESTERDAY}: 20" in run.stdout
            assert "repeats not refunded: usd $500.00" in run.stdout
            assert "--allow-repeats" in run.stderr and "new --batch-id" in run.stderr
            assert run.returncode == 1, run.stdout + run.stderr
        assert counts() == before
        assert refunded(charges) == [2_500] * 20

        # Yesterday's batch id again is a replay of yesterday's refunds, not a repeat.
        replay = bulk_process(file, "--batch-id", YESTERDAY)
        assert replay.returncode == 0 and "20 replayed" in replay.stdout, replay.stdout
        assert counts() == before

        # Meant as new refunds, they need saying so.
        meant = bulk_process(file, "--batch-id", TODAY, "--allow-repeats")
        assert meant.returncode == 0 and "20 refunded" in meant.stdout, meant.stderr
        assert refunded(charges) == [5_000] * 20
        assert_ledger_invariants()

    def test_the_window_decides_how_far_back_a_repeat_is_looked_for(self, tmp_path):
        charges, file = twenty_partial_refunds(tmp_path)
        assert bulk_process(file, "--batch-id", YESTERDAY).returncode == 0
        Refund.objects.update(created_at=timezone.now() - timedelta(hours=50))

        within = bulk_process(file, "--batch-id", TODAY, "--repeat-window", "3d", "--dry-run")
        beyond = bulk_process(file, "--batch-id", TODAY, "--repeat-window", "48h")

        assert within.returncode == 1 and "20 repeat_of_earlier" in within.stdout
        assert beyond.returncode == 0 and "20 refunded" in beyond.stdout, beyond.stdout
        assert refunded(charges) == [5_000] * 20


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestTwoBatchIdsAtOnce:
    def test_the_same_file_under_two_new_batch_ids_at_once_refunds_each_row_once(self, tmp_path):
        charges, file = twenty_partial_refunds(tmp_path)
        runs = [
            start_command(
                "bulk_refund",
                str(file),
                "--batch-id",
                batch,
                *("--jobs", "2"),
                *("--report", str(tmp_path / f"{batch}.csv")),
                **QUICK,
            )
            for batch in (YESTERDAY, TODAY)
        ]
        said = [run.communicate(timeout=180) for run in runs]

        assert refunded(charges) == [2_500] * 20, said
        reports = [report_rows(tmp_path / f"{batch}.csv") for batch in (YESTERDAY, TODAY)]
        for a, b in zip(*reports, strict=True):
            assert sorted((a["outcome"], b["outcome"])) == ["refunded", "repeat_of_earlier"]
        # Each run exits 1 exactly when it met a row the other had refunded first.
        for run, report in zip(runs, reports, strict=True):
            repeats = sum(r["outcome"] == "repeat_of_earlier" for r in report)
            assert run.returncode == (1 if repeats else 0)
        assert_ledger_invariants()


@pytest.mark.django_db
def test_the_summary_tells_reserved_money_from_refunded(
    tmp_path, inline_dispatch, settings, django_user_model
):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    user = django_user_model.objects.create_user("bob", password="x", is_staff=True)
    RefundLimit.objects.create(user=user, currency="usd", per_refund=10_000, per_day=100_000)
    big, small = ChargeFactory(amount=20_000), ChargeFactory(amount=5_000)
    file = write_csv(
        tmp_path / "in.csv",
        [[big.pk, "15000", "duplicate", ""], [small.pk, "100", "duplicate", ""]],
    )

    dry = bulk(file, "--batch-id", "b1", "--requested-by", "bob", "--dry-run")
    real = bulk(file, "--batch-id", "b1", "--requested-by", "bob")

    assert "would refund: usd $1.00" in dry[1]
    assert "would await approval (reserved, not refunded): usd $150.00" in dry[1]
    assert "$151.00" not in dry[1]
    assert real[0] == 0, real
    assert "refunded: usd $1.00" in real[1]
    assert "awaiting approval (reserved, not refunded): usd $150.00" in real[1]
    assert "$151.00" not in real[1]
