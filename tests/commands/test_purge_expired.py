"""manage.py purge_expired and its alias purge_idempotency_keys: the summary lines, the dry
run, bad input, one run at a time between real processes, and the refund worker's daily run."""

import io
import os
import re
import signal
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger_app.management.commands import process_refunds
from ledger_app.models import JobLease, ProviderEvent
from ledger_app.operations import job_leases, retention
from tests.processes import run_command, start_command
from tests.retention_rows import just_inside, just_outside, provider_event

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]

KINDS_SAID = [
    "events, older than 30 days:",
    "provider events, older than 90 days:",
    "idempotency keys of final refunds and charges, older than 90 days:",
    "rate counters, of windows that have ended:",
    "admin sign-in records, older than 90 days:",
    "simulated provider requests, older than 7 days:",
]


def run(name, *args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(name, *map(str, args), stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def old_provider_events():
    """Three provider events past their 90 days, one within them."""
    for n in range(3):
        provider_event(f"evt_old{n}", just_outside(90 + n))
    provider_event("evt_recent", just_inside(90))


class TestPurgeExpired:
    def test_says_what_it_deleted_in_one_line_per_kind(self, old_provider_events):
        code, out, _ = run("purge_expired")

        assert code == 0
        lines = out.splitlines()
        assert [line.split(": ", 1)[0] for line in lines] == ["purge_expired"] * len(KINDS_SAID)
        for line, kind in zip(lines, KINDS_SAID, strict=True):
            assert line.startswith(f"purge_expired: {kind}"), line
        assert "purge_expired: provider events, older than 90 days: 3 provider events deleted" in (
            lines
        )
        assert list(ProviderEvent.objects.values_list("pk", flat=True)) == ["evt_recent"]

    def test_a_dry_run_counts_the_same_and_deletes_nothing(self, old_provider_events):
        code, out, _ = run("purge_expired", "--dry-run")

        assert code == 0
        assert (
            "purge_expired (dry run): provider events, older than 90 days: "
            "3 provider events would be deleted"
        ) in out.splitlines()
        assert ProviderEvent.objects.count() == 4
        assert not JobLease.objects.exists()

    @pytest.mark.parametrize("size", ["0", "-1", "100001"])
    def test_a_batch_size_out_of_bounds_is_refused_and_changes_nothing(
        self, old_provider_events, size
    ):
        code, out, err = run("purge_expired", "--batch-size", size)

        assert code == 2 and "--batch-size must be 1 to 100000" in err
        assert out == "" and ProviderEvent.objects.count() == 4

    @pytest.mark.parametrize("pause", ["-0.5", "101", "nan", "inf"])
    @pytest.mark.parametrize("name", ["purge_expired", "purge_idempotency_keys"])
    def test_a_pause_out_of_bounds_is_refused_and_changes_nothing(
        self, old_provider_events, name, pause
    ):
        code, out, err = run(name, "--pause", pause)

        assert code == 2 and "--pause must be 0 to 100" in err
        assert out == "" and ProviderEvent.objects.count() == 4
        assert not JobLease.objects.exists()

    @pytest.mark.parametrize(("args", "pause"), [((), 1.0), (("--pause", "0"), 0.0)])
    def test_pauses_after_each_batch_as_long_as_it_took_unless_told_not_to(
        self, old_provider_events, monkeypatch, args, pause
    ):
        clock = iter(range(0, 10_000, 3))  # each reading of the clock 3 s after the last
        monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
        slept: list[float] = []
        monkeypatch.setattr(time, "sleep", slept.append)

        code, _, _ = run("purge_expired", "--batch-size", "1", *args)

        assert code == 0 and list(ProviderEvent.objects.values_list("pk", flat=True)) == [
            "evt_recent"
        ]
        # three batches of one provider event, each read 3 s apart on the clock
        assert slept == ([3.0 * pause] * 3 if pause else [])

    def test_while_another_run_holds_the_job_it_says_so_and_exits_0(self, old_provider_events):
        other = job_leases.claim_lease(name=retention.JOB, seconds=300)
        assert other is not None

        code, out, _ = run("purge_expired")

        assert code == 0
        assert out.startswith(f"purge_expired: another run holds the job ({other.holder} until ")
        assert out.rstrip().endswith("nothing done")
        assert ProviderEvent.objects.count() == 4


class TestPurgeIdempotencyKeysAlias:
    def test_runs_under_the_same_lease_as_purge_expired(self):
        job_leases.claim_lease(name=retention.JOB, seconds=300)

        code, out, _ = run("purge_idempotency_keys", "--older-than", "30")

        assert code == 0 and "purge_idempotency_keys: another run holds the job" in out

    def test_purges_keys_only_with_the_setting_by_default(self, old_provider_events, settings):
        settings.IDEMPOTENCY_KEY_RETENTION_DAYS = 45

        code, out, _ = run("purge_idempotency_keys")

        assert code == 0
        assert out == (
            "purge_idempotency_keys: idempotency keys of final refunds and charges, "
            "older than 45 days: 0 keys deleted\n"
        )
        assert ProviderEvent.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_two_processes_at_once_one_purges_the_other_says_so_and_exits_0(old_provider_events):
    """Real processes on the same database (PostgreSQL or SQLite). The first stops after its
    first batch, holding the job; the second finds it held. The first then dies there, and
    once its lease has run out a third run takes the job and finishes."""
    first = start_command(
        "purge_expired", "--batch-size", "1", LEDGER_FAULT_HANG_AT=("purge.batch_committed")
    )
    assert first.stderr is not None  # start_command pipes it
    try:
        said: list[str] = []
        while "fault point reached: purge.batch_committed" not in (line := first.stderr.readline()):
            assert line, "the first run ended before its first batch:\n" + "".join(said)
            said.append(line)

        second = run_command("purge_expired")

        assert second.returncode == 0, second.stderr
        assert "purge_expired: another run holds the job (" in second.stdout
        assert ProviderEvent.objects.count() == 3  # the first run's first batch only
    finally:
        first.kill()
        first.wait(10)

    JobLease.objects.filter(pk=retention.JOB).update(
        leased_until=timezone.now() - timedelta(seconds=1)  # as five minutes later
    )
    third = run_command("purge_expired")

    assert third.returncode == 0, third.stderr
    assert "provider events, older than 90 days: 2 provider events deleted" in third.stdout
    assert list(ProviderEvent.objects.values_list("pk", flat=True)) == ["evt_recent"]


@pytest.mark.django_db(transaction=True)
def test_two_processes_started_together_delete_each_row_once_and_both_exit_0():
    """No fault point: whichever claims the job first purges (in batches of one, so it
    takes a while); the other either finds it held and says so, or comes after it and
    finds nothing left. Either way every row goes exactly once."""
    for n in range(150):
        provider_event(f"evt_old{n}", just_outside(90))

    both = [start_command("purge_expired", "--batch-size", "1") for _ in range(2)]
    outputs = [process.communicate(timeout=120) for process in both]

    assert [process.returncode for process in both] == [0, 0], outputs
    deleted = [
        int(m.group(1))
        for out, _ in outputs
        for m in re.finditer(r"provider events, older than 90 days: (\d+) provider", out)
    ]
    held = sum("another run holds the job" in out for out, _ in outputs)
    assert sum(deleted) == 150 and len(deleted) + held == 2
    assert not ProviderEvent.objects.exists()


class TestWorkerDailyRun:
    def stop_after(self, monkeypatch, passes: int) -> list[int]:
        """process_refunds --loop stops after `passes` passes (SIGTERM, as a deploy sends),
        and asks at every pass whether the purge is due: only the database can say no."""
        counted: list[int] = []
        send = process_refunds.process_pending_refunds

        def counting(**arguments):
            counted.append(1)
            if len(counted) == passes:
                os.kill(os.getpid(), signal.SIGTERM)
            return send(**arguments)

        monkeypatch.setattr(process_refunds, "process_pending_refunds", counting)
        monkeypatch.setattr(process_refunds.Command, "purge_check_seconds", 0.0)
        return counted

    def test_the_loop_purges_once_not_at_every_pass_and_not_again_after_a_restart(
        self, monkeypatch, old_provider_events
    ):
        passes = self.stop_after(monkeypatch, 5)

        code, out, _ = run("process_refunds", "--loop", "--poll-seconds", "0")

        assert code == 0 and len(passes) == 5
        assert out.count("purge_expired: provider events") == 1
        assert ProviderEvent.objects.count() == 1
        provider_event("evt_old_again", just_outside(90))
        passes.clear()

        code, out, _ = run("process_refunds", "--loop", "--poll-seconds", "0")  # restarted

        assert code == 0 and len(passes) == 5
        assert "purge_expired" not in out
        assert ProviderEvent.objects.filter(pk="evt_old_again").exists()

    def test_the_loop_purges_again_when_a_day_has_passed(self, monkeypatch, old_provider_events):
        retention.purge_expired()
        JobLease.objects.update(last_finished_at=timezone.now() - timedelta(days=1, minutes=1))
        provider_event("evt_old_again", just_outside(90))
        self.stop_after(monkeypatch, 2)

        code, out, _ = run("process_refunds", "--loop", "--poll-seconds", "0")

        assert code == 0 and out.count("purge_expired: provider events") == 1
        assert not ProviderEvent.objects.filter(pk="evt_old_again").exists()

    def test_a_single_pass_does_not_purge(self, old_provider_events):
        code, out, _ = run("process_refunds")

        assert code == 0 and "purge_expired" not in out
        assert ProviderEvent.objects.count() == 4
