"""bulk_refund --jobs N: the same rows end the same way as with one job, reported in row
order, and a run stopped or killed anywhere leaves every row refunded at most once and a
re-run does the rest.

The PostgreSQL tests run manage.py as real processes (the jobs are forked processes with
their own connections), so they commit their data. Refunds stay pending (worker mode):
what is proven here is the reservation, which is where rows of one charge interact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from django.core.management import call_command

from ledger_app.models import Charge, IdempotencyRecord, Refund
from ledger_app.refunds.bulk_jobs import job_for
from tests.commands.bulk_runs import bulk, counts, report_rows, write_csv
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants
from tests.processes import ROOT, command_env, run_command

WORKER = {"REFUND_DISPATCH": "worker"}
HEADER = ("charge", "amount", "reason", "note", "idempotency_key")


def run_bulk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_command("bulk_refund", *map(str, args), timeout=timeout, env=WORKER)


def start_bulk(*args: str) -> subprocess.Popen:
    """manage.py bulk_refund in a session of its own, so that its process group (it and
    its jobs) can be signalled as a terminal's Ctrl-C or a supervisor would."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "bulk_refund", *map(str, args)],
        cwd=ROOT,
        env=command_env(**WORKER),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_refunds(process: subprocess.Popen, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while Refund.objects.count() < at_least:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "too slow"
        time.sleep(0.02)


def group_is_gone(pgid: int) -> bool:
    """No process of the group is left (every job ended with the command)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def mixed_file(path, tag: str, charges: dict[str, list[Charge]], pairs: list[tuple]):
    """Rows over many charges, shuffled: charges with room for all their rows, charges
    whose rows run out (which row is refused depends on the order of that charge's
    rows), blank amounts, unknown charges and reasons, and rows with their own keys: a
    key repeated as is (replayed), a key reused on another charge (refused), and a key
    whose first row is refused and whose later row on another charge then refunds.
    `pairs` are index pairs of big charges that run in different jobs."""
    big, small = charges["big"], charges["small"]
    rows = [[c.pk, "100", "duplicate", f"row of {i}", ""] for i, c in enumerate(big)] * 3
    for c in small:  # 1,000 each: 400, 400, then refused, then the 200 left, then nothing
        rows += [[c.pk, a, "requested_by_customer", "", ""] for a in ("400", "400", "400", "")]
        rows += [[c.pk, "100", "", "", ""]]
    rows += [[f"ch_missing_{tag}_{n}", "100", "", "", ""] for n in range(3)]
    rows += [[big[n].pk, "100", "because", "", ""] for n in range(3)]
    random.Random(7).shuffle(rows)
    (a, b), (c, d), (e, f) = pairs

    # A key's first row comes after six other rows of its charge (queued in its job) and
    # its second row, on another charge, right after it: the second must still go second.
    def after_six(charge: Charge, amount: str, key: str) -> list[list[str]]:
        return [[charge.pk, "10", "", "", ""]] * 6 + [[charge.pk, amount, "", "", key]]

    keyed = [
        (4, [[big[a].pk, "150", "duplicate", "", f"{tag}-order-1"]]),
        (30, [[big[a].pk, "150", "duplicate", "", f"{tag}-order-1"]]),  # replayed
        (10, after_six(big[c], "120", f"{tag}-order-2")),
        (17, [[big[d].pk, "120", "", "", f"{tag}-order-2"]]),  # reused on another charge
        (20, after_six(big[e], "9999999", f"{tag}-order-3")),  # too large: the key stays free
        (27, [[big[f].pk, "130", "", "", f"{tag}-order-3"]]),  # so this one refunds
    ]
    for position, block in keyed:
        rows[position:position] = block
    return write_csv(path, rows, header=HEADER)


def mixed_charges() -> dict[str, list[Charge]]:
    return {
        "big": [ChargeFactory(amount=100_000) for _ in range(12)],
        "small": [ChargeFactory(amount=1_000) for _ in range(6)],
    }


def pairs_in_different_jobs(big: list[Charge], jobs: int) -> list[tuple[int, int]]:
    pairs = [
        (i, j)
        for i in range(len(big))
        for j in range(len(big))
        if job_for(big[i].pk, jobs) != job_for(big[j].pk, jobs)
    ]
    return pairs[:: max(1, len(pairs) // 3)][:3]


def outcomes(report) -> list[tuple]:
    """What each row came to, without what differs by run (charge ids, refund ids)."""
    return [
        (r["row"], r["outcome"], r["amount"], r["status"], r["code"], bool(r["refund"]))
        for r in report
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestJobsOnPostgres:
    def test_three_jobs_end_every_row_as_one_job_does_and_a_rerun_replays(self, tmp_path):
        one, three = mixed_charges(), mixed_charges()
        pairs = pairs_in_different_jobs(three["big"], 3)
        mixed_file(tmp_path / "one.csv", "one", one, pairs)
        mixed_file(tmp_path / "three.csv", "three", three, pairs)

        by_one = run_bulk(tmp_path / "one.csv", "--batch-id", "b1", "--report", tmp_path / "1.csv")
        by_three = run_bulk(
            tmp_path / "three.csv",
            "--batch-id",
            "b3",
            "--jobs",
            "3",
            "--report",
            tmp_path / "3.csv",
        )

        assert (by_one.returncode, by_three.returncode) == (1, 1), by_three.stderr
        report_one, report_three = report_rows(tmp_path / "1.csv"), report_rows(tmp_path / "3.csv")
        assert outcomes(report_three) == outcomes(report_one)
        assert [r["row"] for r in report_three] == [str(n) for n in range(1, 91)]
        assert by_three.stdout == by_one.stdout  # the same summary line
        # The file really mixes what it says (as refused with one job):
        codes = {r["code"] for r in report_one}
        assert codes == {
            "",
            "amount_too_large",
            "charge_already_refunded",
            "resource_missing",
            "invalid_reason",
            "idempotency_key_reused",
        }
        assert [r["outcome"] for r in report_one].count("replayed") == 1
        assert [c.amount_refunded for c in Charge.objects.filter(pk__in=three["small"])] == [
            1_000
        ] * 6
        assert "key three-order-2 was used for a different request" in by_three.stderr

        before = counts()
        again = run_bulk(
            tmp_path / "three.csv",
            "--batch-id",
            "b3",
            "--jobs",
            "2",
            "--report",
            tmp_path / "r.csv",
        )

        assert again.returncode == 1
        assert counts() == before
        for first, rerun in zip(report_three, report_rows(tmp_path / "r.csv"), strict=True):
            if first["refund"]:
                assert (rerun["outcome"], rerun["refund"]) == ("replayed", first["refund"])
            else:
                assert rerun["outcome"] == "refused"
        assert_ledger_invariants()

    def test_killed_whole_then_rerun_refunds_every_row_once(self, tmp_path):
        charges = [ChargeFactory(amount=100_000) for _ in range(20)]
        rows = [
            [c.pk, "100", "duplicate", "", f"own-{n}-{i}" if n % 3 == 0 else ""]
            for n in range(6)
            for i, c in enumerate(charges)
        ]
        file = write_csv(tmp_path / "in.csv", rows, header=HEADER)  # 120 rows
        keys = {row[4] or f"bulk:night:{number}" for number, row in enumerate(rows, start=1)}

        first = start_bulk(file, "--batch-id", "night", "--jobs", "3")
        try:
            wait_for_refunds(first, 30)
            os.killpg(first.pid, signal.SIGKILL)  # the command and every job, mid-row
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        assert group_is_gone(first.pid)
        done_before = Refund.objects.count()
        assert 30 <= done_before < 120

        rerun = run_bulk(file, "--batch-id", "night", "--jobs", "3", "--report", tmp_path / "r.csv")

        assert rerun.returncode == 0, rerun.stderr
        report = report_rows(tmp_path / "r.csv")
        assert [r["row"] for r in report] == [str(n) for n in range(1, 121)]
        assert [r["outcome"] for r in report].count("replayed") == done_before
        assert {r["outcome"] for r in report} == {"replayed", "pending"}
        assert Refund.objects.count() == 120
        assert set(IdempotencyRecord.objects.values_list("key", flat=True)) == keys
        assert all(c.amount_refunded == 600 for c in Charge.objects.all())
        assert_ledger_invariants()
        call_command("verify_ledger")

    @pytest.mark.parametrize(
        ("signum", "to_group"),
        [(signal.SIGINT, True), (signal.SIGTERM, False)],
        ids=["ctrl-c-to-every-process", "sigterm-to-the-command"],
    )
    def test_a_stop_finishes_each_jobs_row_reports_it_and_exits_as_one_job_does(
        self, tmp_path, signum, to_group
    ):
        charges = [ChargeFactory(amount=100_000) for _ in range(20)]
        file = write_csv(tmp_path / "in.csv", rows_for(charges, 6))  # 120 rows

        run = start_bulk(file, "--batch-id", "b", "--jobs", "3", "--report", tmp_path / "r.csv")
        try:
            wait_for_refunds(run, 30)
            if to_group:
                os.killpg(run.pid, signum)
            else:
                run.send_signal(signum)
            out, err = run.communicate(timeout=30)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
        assert group_is_gone(run.pid)

        assert run.returncode == -signum  # as one job ends: killed by the signal
        assert out == ""
        assert f"bulk_refund stopped by {signum.name}: " in err and "--batch-id b" in err
        report = report_rows(tmp_path / "r.csv")
        numbers = [int(r["row"]) for r in report]
        assert numbers == sorted(numbers) and 30 <= len(numbers) < 120
        # Every refund written is reported: no job was cut off in the middle of a row.
        assert {r["idempotency_key"] for r in report} == set(
            IdempotencyRecord.objects.values_list("key", flat=True)
        )
        assert {r["outcome"] for r in report} == {"pending"}
        assert_ledger_invariants()
        if signum == signal.SIGINT:
            return  # the re-run after a stop is the same as after SIGTERM

        rerun = run_bulk(file, "--batch-id", "b", "--jobs", "2")

        assert rerun.returncode == 0, rerun.stderr
        done = len(report)
        assert f"120 rows: {120 - done} pending, {done} replayed;" in rerun.stdout
        assert Refund.objects.count() == 120
        assert all(c.amount_refunded == 600 for c in Charge.objects.all())
        assert_ledger_invariants()

    def test_an_unusable_file_exits_2_with_jobs_and_writes_nothing(self, tmp_path):
        charge = ChargeFactory(amount=100_000)
        rows = [[charge.pk, "10", "", ""]] * 30 + [[charge.pk, "10.5", "", ""]]

        code, _, err = bulk(write_csv(tmp_path / "in.csv", rows), "--batch-id", "b", "--jobs", "4")

        assert code == 2
        assert "unusable file" in err and "nothing was written" in err
        assert Refund.objects.count() == 0


def rows_for(charges, per_charge):
    """Rows of every charge in turn, `per_charge` rounds: every job has work throughout."""
    return [[c.pk, "100", "duplicate", ""] for _ in range(per_charge) for c in charges]


@pytest.mark.django_db
class TestJobsWhereTheyCannotHelp:
    """On SQLite (one writer at a time) and inside a transaction (as these tests run on
    PostgreSQL), --jobs runs as one job and says so; a dry run is always one job."""

    def test_jobs_run_as_one_job_with_the_same_outcomes(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(tmp_path / "in.csv", [[charge.pk, "600", "", ""]] * 2)

        code, out, err = bulk(file, "--batch-id", "b", "--jobs", "3", "--report", tmp_path / "r")

        assert "--jobs 3: running as one job" in err
        assert code == 1
        assert out.startswith("bulk_refund: 2 rows: 1 pending, 1 refused") or out.startswith(
            "bulk_refund: 2 rows: 1 refunded, 1 refused"
        )
        assert [(r["outcome"], r["code"]) for r in report_rows(tmp_path / "r")][1] == (
            "refused",
            "amount_too_large",
        )

    def test_a_dry_run_is_one_job(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(tmp_path / "in.csv", [[charge.pk, "600", "", ""]] * 2)
        before = counts()

        code, out, err = bulk(file, "--batch-id", "b", "--dry-run", "--jobs", "4")

        assert "--jobs 4: running as one job: a dry run" in err
        assert (code, counts()) == (1, before)
        assert out.startswith("bulk_refund (dry run): 2 rows: 1 refused, 1 would_refund")

    @pytest.mark.parametrize("jobs", ["0", "33", "two", "-1"])
    def test_jobs_must_be_1_to_32(self, tmp_path, jobs):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(tmp_path / "in.csv", [[charge.pk, "600", "", ""]])
        before = counts()

        code, _, err = bulk(file, "--batch-id", "b", "--jobs", jobs)

        assert code != 0 and "1 to 32" in err
        assert counts() == before
