"""The exit codes of `manage.py refund` and `manage.py process_refunds`, run as real
processes (the code a shell script or a supervisor sees), for every way a refund ends.

refund:           0 succeeded or pending, 1 refused, 3 failed, 4 unknown; a replay exits
                  by the replayed refund's status.
process_refunds:  1 interrupted by database errors, else 4 any unknown, else 3 any
                  failed, else 0.

The simulated provider declines refunds of a charge whose metadata says
`simulate_refund: decline` and times out for `timeout`. The processes use the test
database (a file on SQLite, a server on PostgreSQL), so the tests commit their data."""

from __future__ import annotations

import subprocess

import pytest
from django.db import transaction

from ledger_app.models import Charge, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.processes import run_command

pytestmark = pytest.mark.django_db(transaction=True)

INLINE = {"REFUND_DISPATCH": "inline"}
WORKER = {"REFUND_DISPATCH": "worker"}


def charge_that(behaviour: str, amount: int = 5_000) -> Charge:
    metadata = {} if behaviour == "succeed" else {"simulate_refund": behaviour}
    return ChargeFactory(amount=amount, currency="usd", metadata=metadata)


def refund_process(charge: Charge, *args: str, env=INLINE) -> subprocess.CompletedProcess:
    return run_command("refund", charge.pk, "--amount", "1200", *args, env=env)


def said(done: subprocess.CompletedProcess, prefix: str) -> str:
    """The stderr line that starts with `prefix` ("" if none; log lines may come first)."""
    return next((line for line in done.stderr.splitlines() if line.startswith(prefix)), "")


def refund_line(done: subprocess.CompletedProcess) -> tuple[Refund, list[str]]:
    """The refund the printed line names, and the rest of the line after its status."""
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    refund_id, amount, currency, status, *rest = lines[0].split()
    refund = Refund.objects.get(pk=refund_id)
    assert (int(amount), currency, status) == (refund.amount, refund.currency, refund.status)
    return refund, rest


class TestRefundCommand:
    def test_succeeded_exits_0(self):
        charge = charge_that("succeed")

        done = refund_process(charge)

        assert done.returncode == 0, done.stderr
        refund, rest = refund_line(done)
        assert refund.status == "succeeded" and rest == []
        assert not said(done, "failed: ") and not said(done, "unknown: ")

    def test_pending_in_worker_mode_exits_0(self):
        """Accepted and queued: the worker sends it. Nothing went wrong."""
        charge = charge_that("succeed")

        done = refund_process(charge, env=WORKER)

        assert done.returncode == 0, done.stderr
        refund, _ = refund_line(done)
        assert refund.status == "pending"
        charge.refresh_from_db()
        assert charge.amount_refunded == 1_200  # reserved until the worker settles it

    def test_declined_by_the_provider_exits_3_and_says_the_amount_is_released(self):
        charge = charge_that("decline")

        done = refund_process(charge)

        assert done.returncode == 3, (done.stdout, done.stderr)
        refund, rest = refund_line(done)
        assert refund.status == "failed" and rest == ["(simulated_decline)"]
        line = said(done, "failed: the provider declined")
        assert refund.id in line and "released" in line
        assert "Traceback" not in done.stderr
        charge.refresh_from_db()
        assert charge.amount_refunded == 0

    def test_no_answer_from_the_provider_exits_4_and_says_to_reconcile(self):
        charge = charge_that("timeout")

        done = refund_process(charge)

        assert done.returncode == 4, (done.stdout, done.stderr)
        refund, _ = refund_line(done)
        assert refund.status == "unknown"
        line = said(done, "unknown: ")
        assert refund.id in line
        assert "stays reserved" in line and "manage.py reconcile" in line
        assert "Traceback" not in done.stderr
        charge.refresh_from_db()
        assert charge.amount_refunded == 1_200  # reserved until the provider says

    def test_refused_exits_1_and_writes_nothing(self):
        charge = charge_that("succeed", amount=1_000)

        done = refund_process(charge)  # 1,200 of a 1,000 charge

        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        assert "amount_too_large" in done.stderr
        assert (Refund.objects.count(), IdempotencyRecord.objects.count()) == (0, 0)
        assert LedgerEntry.objects.filter(refund__isnull=False).count() == 0

    @pytest.mark.parametrize(
        ("behaviour", "env", "status", "code"),
        [
            ("succeed", INLINE, "succeeded", 0),
            ("succeed", WORKER, "pending", 0),
            ("decline", INLINE, "failed", 3),
            ("timeout", INLINE, "unknown", 4),
        ],
    )
    def test_a_replay_exits_by_the_replayed_refunds_status(self, behaviour, env, status, code):
        charge = charge_that(behaviour)
        first = refund_process(charge, "--idempotency-key", "cli-replay", env=env)

        again = refund_process(charge, "--idempotency-key", "cli-replay", env=env)

        assert (first.returncode, again.returncode) == (code, code), again.stderr
        refund, rest = refund_line(again)
        assert refund.status == status and rest[-1] == "(replayed)"
        assert refund_line(first)[0] == refund
        assert Refund.objects.count() == 1
        told = {"failed: ": code == 3, "unknown: ": code == 4}
        assert {prefix: bool(said(again, prefix)) for prefix in told} == told

    def test_help_states_the_exit_codes(self):
        done = run_command("refund", "--help")

        assert done.returncode == 0
        text = " ".join(done.stdout.split())
        for fragment in ["Exit 0", "1 when refused", "3 when it failed", "4 when its outcome"]:
            assert fragment in text, fragment


def queue(*behaviours: str) -> list[Refund]:
    """Pending refunds (worker_dispatch), one per behaviour, for the worker to send."""
    refunds = [
        create_refund(RefundRequest(charge_id=charge_that(b).pk, amount=100)).item
        for b in behaviours
    ]
    assert all(r.status == "pending" for r in refunds)
    return refunds


def worker(**env: str) -> subprocess.CompletedProcess:
    return run_command("process_refunds", "--once", env=env)


@pytest.mark.usefixtures("worker_dispatch")
class TestProcessRefundsCommand:
    def test_nothing_to_do_exits_0(self):
        done = worker()

        assert done.returncode == 0, done.stderr
        assert "process_refunds: nothing to do" in done.stdout

    def test_all_succeeded_exits_0(self):
        queue("succeed", "succeed")

        done = worker()

        assert done.returncode == 0, done.stderr
        assert "process_refunds: 2 succeeded" in done.stdout
        assert not said(done, "failed: ") and not said(done, "unknown: ")

    def test_a_decline_exits_3(self):
        queue("succeed", "decline")

        done = worker()

        assert done.returncode == 3, (done.stdout, done.stderr)
        assert "process_refunds: 1 failed, 1 succeeded" in done.stdout
        assert said(done, "failed: the provider declined 1 refund")
        assert not said(done, "unknown: ")
        assert "Traceback" not in done.stderr

    def test_an_unknown_outcome_exits_4_even_with_declines(self):
        queue("decline", "timeout", "succeed")

        done = worker()

        assert done.returncode == 4, (done.stdout, done.stderr)
        assert "process_refunds: 1 failed, 1 succeeded, 1 unknown" in done.stdout
        assert "manage.py reconcile" in said(done, "unknown: the provider did not say")
        assert said(done, "failed: the provider declined 1 refund")
        assert "Traceback" not in done.stderr
        assert sorted(Refund.objects.values_list("status", flat=True)) == [
            "failed",
            "succeeded",
            "unknown",
        ]

    def test_help_states_the_exit_codes(self):
        done = run_command("process_refunds", "--help")

        text = " ".join(done.stdout.split())
        assert done.returncode == 0
        assert "Exit 1 when database errors interrupted some refunds, else 4" in text

    @pytest.mark.postgres
    def test_a_database_error_exits_1_whatever_else_ended_unknown(self):
        """A refund whose charge this test keeps locked cannot be settled (the worker's
        lock_timeout ends the wait): interrupted, exit 1, before the unknown one's 4."""
        _, locked = queue("timeout", "succeed")

        with transaction.atomic():
            Charge.objects.select_for_update().get(pk=locked.charge_id)
            done = worker(DATABASE_LOCK_TIMEOUT_MS="200")

        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "1 unknown, 1 interrupted by database errors" in done.stdout
        assert "some refunds were interrupted" in done.stderr
        # Left as it was: pending, its amount reserved, for a later run once its lease ends.
        locked.refresh_from_db()
        assert locked.status == "pending" and locked.charge.amount_refunded == 100
