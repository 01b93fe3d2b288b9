"""purge_expired: what each kind loses at its retention's edge, what is never removed
(the books, and anything a charge or refund that is not final needs), the dry run, one
run at a time (the job's lease), and the refund worker's daily schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.utils import timezone

from ledger_app import faults
from ledger_app.events import services as events
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import (
    Charge,
    Event,
    EventType,
    IdempotencyRecord,
    JobLease,
    LedgerEntry,
    ProviderEvent,
    RateCounter,
    Refund,
    WebhookDelivery,
)
from ledger_app.operations import job_leases, retention
from ledger_app.operations.retention import Pace, purge_expired, purge_expired_if_due
from ledger_app.provider.dispatch import process_pending_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderCharge, ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory
from tests.retention_rows import (
    dated,
    just_inside,
    just_outside,
    provider_event,
    provider_request,
    rate_counter,
    sign_in_records,
)
from tests.services.people import set_limit, staff

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch"),
    pytest.mark.sqlite_pass,
]

DELIVERED = WebhookDelivery.Status.DELIVERED
PENDING = WebhookDelivery.Status.PENDING


def removed(result, kind: str) -> dict[str, int]:
    """What the run said it removed of `kind`, by plural noun."""
    purged = next(p for p in result.purged if p.kind == kind)
    return {t.plural: t.count for t in purged.tallies}


@pytest.fixture
def endpoint(settings):
    """An endpoint that wants every event: each event gets a delivery."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    return create_endpoint(url="http://127.0.0.1:9/hook", enabled_events=["*"])


def delivered_refund(amount: int = 100, **refund) -> Refund:
    """A succeeded refund whose events were all delivered."""
    charge = ChargeFactory(amount=5_000)
    made = create_refund(RefundRequest(charge_id=charge.pk, amount=amount, **refund)).item
    WebhookDelivery.objects.filter(event__charge=charge).update(status=DELIVERED)
    assert made.status == Refund.Status.SUCCEEDED
    return made


def events_of(obj: Charge | Refund):
    field = "charge" if isinstance(obj, Charge) else "refund"
    return Event.objects.filter(**{field: obj})


def refund_in_doubt(state: str, charge: Charge, settings, django_user_model) -> Refund:
    """A refund of `charge` that is not final: `pending` (reserved, the worker has not sent
    it yet), `unknown` (sent, no answer: the amount stays reserved) or `awaiting_approval`
    (over its requester's limit, waiting for another person). Keyed `k-<state>`."""
    agent = None
    if state == "pending":
        settings.REFUND_DISPATCH = "worker"
    elif state == "unknown":
        Charge.objects.filter(pk=charge.pk).update(metadata={"simulate_refund": "timeout"})
    else:
        agent = staff(django_user_model, "agent")
        set_limit(user=agent, per_refund=50)
    made = RefundRequest(charge_id=charge.pk, amount=100, idempotency_key=f"k-{state}", actor=agent)
    refund = create_refund(made).item
    assert refund.status == state
    return refund


IN_DOUBT = ["pending", "unknown", "awaiting_approval"]


class TestEvents:
    def test_removes_events_and_deliveries_just_past_retention_and_keeps_those_just_inside(
        self, endpoint
    ):
        old, recent = delivered_refund(), delivered_refund()
        dated(events_of(old.charge), "created_at", just_outside(30))
        dated(events_of(recent.charge), "created_at", just_inside(30))
        old_deliveries = WebhookDelivery.objects.filter(event__charge=old.charge).count()

        result = purge_expired()

        assert not events_of(old.charge).exists()
        assert not WebhookDelivery.objects.filter(event__charge_id=old.charge_id).exists()
        assert events_of(recent.charge).count() == 4  # charge.succeeded, refund: 3
        assert WebhookDelivery.objects.filter(event__charge=recent.charge).count() == 4
        assert removed(result, "events") == {"events": 4, "webhook deliveries": old_deliveries}
        assert old_deliveries == 4

    def test_the_retention_is_the_setting(self, endpoint, settings):
        settings.EVENT_RETENTION_DAYS = 5
        kept, gone = delivered_refund(), delivered_refund()
        dated(events_of(kept.charge), "created_at", just_inside(5))
        dated(events_of(gone.charge), "created_at", just_outside(5))

        purge_expired()

        assert events_of(kept.charge).exists() and not events_of(gone.charge).exists()

    @pytest.mark.parametrize("attempts", [0, 3], ids=["pending", "retrying"])
    def test_never_removes_a_delivery_still_pending_nor_its_event(self, endpoint, attempts):
        refund = delivered_refund()
        waiting = WebhookDelivery.objects.filter(event__refund=refund).first()
        assert waiting is not None
        WebhookDelivery.objects.filter(pk=waiting.pk).update(
            status=PENDING, attempts=attempts, next_attempt_at=timezone.now() + timedelta(hours=1)
        )
        dated(events_of(refund.charge), "created_at", just_outside(3_000))

        purge_expired()

        assert WebhookDelivery.objects.filter(pk=waiting.pk, status=PENDING).exists()
        assert Event.objects.filter(pk=waiting.event_id).exists()
        assert events_of(refund.charge).count() == 1  # the others went

    @pytest.mark.parametrize("state", IN_DOUBT)
    def test_keeps_every_event_of_a_charge_with_a_refund_in_doubt_or_awaiting_approval(
        self, endpoint, settings, django_user_model, state
    ):
        final = delivered_refund()
        in_doubt = refund_in_doubt(state, final.charge, settings, django_user_model)
        WebhookDelivery.objects.update(status=DELIVERED)
        dated(events_of(final.charge), "created_at", just_outside(3_000))
        before = set(events_of(final.charge).values_list("pk", flat=True))

        purge_expired()

        assert set(events_of(final.charge).values_list("pk", flat=True)) == before
        assert events_of(in_doubt).exists() and events_of(final).exists()
        assert WebhookDelivery.objects.filter(event__charge=final.charge).count() == len(before)

    @pytest.mark.parametrize("status", [Charge.Status.PENDING, Charge.Status.UNKNOWN])
    def test_keeps_the_events_of_a_charge_in_doubt(self, endpoint, status):
        charge = ChargeFactory(amount=1_000, status=status)
        with transaction.atomic():
            events.record(EventType.CHARGE_UPDATED, charge)
        dated(events_of(charge), "created_at", just_outside(3_000))

        purge_expired()

        assert events_of(charge).count() == 1

    def test_removes_them_once_the_refund_is_final(self, endpoint, settings, django_user_model):
        charge = ChargeFactory(amount=5_000)
        refund_in_doubt("pending", charge, settings, django_user_model)
        dated(events_of(charge), "created_at", just_outside(3_000))
        purge_expired()
        assert events_of(charge).exists()

        process_pending_refunds()  # the worker sends it: succeeded
        WebhookDelivery.objects.update(status=DELIVERED)
        dated(events_of(charge), "created_at", just_outside(3_000))
        purge_expired()

        assert not events_of(charge).exists()


class TestProviderEvents:
    def test_removes_those_just_past_retention_and_keeps_those_just_inside(self):
        provider_event("evt_old", just_outside(90))
        provider_event("evt_recent", just_inside(90))

        result = purge_expired()

        assert list(ProviderEvent.objects.values_list("pk", flat=True)) == ["evt_recent"]
        assert removed(result, "provider_events") == {"provider events": 1}


class TestIdempotencyKeys:
    def test_removes_keys_of_final_refunds_just_past_retention_and_keeps_those_just_inside(
        self,
    ):
        delivered_refund(idempotency_key="k-old")
        delivered_refund(idempotency_key="k-recent")
        dated(IdempotencyRecord.objects.filter(key="k-old"), "created_at", just_outside(90))
        dated(IdempotencyRecord.objects.filter(key="k-recent"), "created_at", just_inside(90))

        result = purge_expired()

        assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["k-recent"]
        assert removed(result, "idempotency_keys") == {"keys": 1}

    @pytest.mark.parametrize("state", IN_DOUBT)
    def test_never_removes_the_key_of_a_refund_in_doubt_or_awaiting_approval(
        self, settings, django_user_model, state
    ):
        refund = refund_in_doubt(state, ChargeFactory(amount=5_000), settings, django_user_model)
        dated(IdempotencyRecord.objects.all(), "created_at", just_outside(3_000))

        purge_expired()

        assert IdempotencyRecord.objects.filter(refund=refund).exists()

    def test_a_replay_after_the_key_is_purged_is_a_new_request(self):
        first = delivered_refund(idempotency_key="k-again")
        dated(IdempotencyRecord.objects.all(), "created_at", just_outside(90))
        purge_expired()

        again = create_refund(
            RefundRequest(charge_id=first.charge_id, amount=100, idempotency_key="k-again")
        )

        assert not again.replayed and again.item.pk != first.pk


class TestRateCounters:
    def test_removes_windows_that_have_ended_and_keeps_the_running_ones(self):
        now = datetime.now(UTC)
        rate_counter("ended", now - timedelta(seconds=1))
        rate_counter("running", now + timedelta(minutes=1))

        result = purge_expired()

        assert list(RateCounter.objects.values_list("key", flat=True)) == ["running"]
        assert removed(result, "rate_counters") == {"rate counters": 1}


class TestLoginRecords:
    def test_removes_records_just_past_retention_and_keeps_those_just_inside(self):
        sign_in_records("old", just_outside(90))
        sign_in_records("recent", just_inside(90))

        result = purge_expired()

        for model in (AccessAttempt, AccessLog, AccessFailureLog):
            assert list(model.objects.values_list("username", flat=True)) == ["recent"]
        assert removed(result, "login_records") == {
            "failed sign-in counts": 1,
            "access logs": 1,
            "access failures": 1,
        }

    def test_never_lifts_a_lockout_still_running_whatever_the_retention(self, settings):
        settings.LOGIN_RECORD_RETENTION_DAYS = 1
        settings.AXES_COOLOFF_TIME = timedelta(days=3)
        sign_in_records("locked", timezone.now() - timedelta(days=2))

        purge_expired()

        assert AccessAttempt.objects.filter(username="locked").exists()
        assert not AccessLog.objects.filter(username="locked").exists()


class TestSimulatedProviderLog:
    def test_removes_requests_just_past_retention_and_keeps_those_just_inside(self):
        provider_request("old", just_outside(7))
        provider_request("recent", just_inside(7))

        result = purge_expired()

        assert list(ProviderRequest.objects.values_list("idempotency_key", flat=True)) == ["recent"]
        assert removed(result, "provider_requests") == {"requests": 1}


class TestNeverRemoved:
    def test_charges_refunds_ledger_admin_log_and_provider_books_outlive_everything(
        self, endpoint, admin_user, settings
    ):
        delivered_refund(idempotency_key="k1")
        ProviderCharge.objects.create(
            provider_id="ch_sim",
            idempotency_key="charge:x",
            fingerprint="f",
            amount=1,
            currency="usd",
            status="succeeded",
        )
        LogEntry.objects.create(
            user=admin_user,
            content_type=ContentType.objects.get_for_model(Charge),
            object_id="x",
            object_repr="x",
            action_flag=ADDITION,
        )
        long_ago = timezone.now() - timedelta(days=36_000)
        for model, field in [
            (Charge, "created_at"),
            (Refund, "created_at"),
            (LogEntry, "action_time"),
            (ProviderCharge, "created_at"),
            (ProviderRefund, "created_at"),
        ]:
            dated(model._default_manager.all(), field, long_ago)
        kept = {
            model: model.objects.count()
            for model in (Charge, Refund, LedgerEntry, LogEntry, ProviderCharge, ProviderRefund)
        }
        assert all(kept.values())

        settings.EVENT_RETENTION_DAYS = settings.IDEMPOTENCY_KEY_RETENTION_DAYS = 1
        dated(Event.objects.all(), "created_at", long_ago)
        dated(IdempotencyRecord.objects.all(), "created_at", long_ago)

        result = purge_expired()

        assert result.finished and not Event.objects.exists()  # everything that may go, went
        assert not IdempotencyRecord.objects.exists()
        assert {model: model.objects.count() for model in kept} == kept


class TestDryRun:
    def test_counts_what_the_run_then_deletes_and_deletes_nothing(self, endpoint):
        old = delivered_refund(idempotency_key="k-old")
        dated(events_of(old.charge), "created_at", just_outside(30))
        dated(IdempotencyRecord.objects.all(), "created_at", just_outside(90))
        provider_event("evt_old", just_outside(90))
        rate_counter("ended", datetime.now(UTC) - timedelta(seconds=1))
        sign_in_records("old", just_outside(90))
        provider_request("old", just_outside(7))
        tables = (
            *(Event, WebhookDelivery, IdempotencyRecord, ProviderEvent, RateCounter),
            *(AccessAttempt, AccessLog, AccessFailureLog, ProviderRequest),
        )
        before = {model: model.objects.count() for model in tables}

        dry = purge_expired(dry_run=True)
        after_dry = {model: model.objects.count() for model in tables}
        leases_after_dry = JobLease.objects.count()
        real = purge_expired()

        assert after_dry == before
        assert leases_after_dry == 0  # a dry run claims nothing and records no run
        assert [p.tallies for p in dry.purged] == [p.tallies for p in real.purged]
        assert sum(t.count for p in real.purged for t in p.tallies) == 4 + 4 + 1 + 1 + 1 + 3 + 1
        assert dry.dry_run and "would be deleted" in dry.purged[0].line(dry_run=True)


class TestBatches:
    def test_takes_every_row_in_batches_even_many_at_one_instant(self):
        at = just_outside(90)
        for n in range(7):
            provider_event(f"evt_same{n}", at)
        provider_event("evt_later", at + timedelta(seconds=1))
        batches = []

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(faults, "checkpoint", lambda point: batches.append(point))
            result = purge_expired(kinds=["provider_events"], pace=Pace(batch_size=3))

        assert not ProviderEvent.objects.exists()
        assert removed(result, "provider_events") == {"provider events": 8}
        assert len(batches) == 3  # 3 + 3 + 2 (with the later one)

    def test_refuses_unknown_kinds_and_bounds_below_one_and_changes_nothing(self):
        provider_event("evt_old", just_outside(90))
        for bad in (
            {"kinds": ["ledger_entries"]},
            {"pace": Pace(batch_size=0)},
            {"days": {"events": 0}},
        ):
            with pytest.raises(ValueError, match="purge_expired"):
                purge_expired(**bad)
        assert ProviderEvent.objects.exists()
        assert not JobLease.objects.exists()


class TestOneRunAtATime:
    def test_a_run_while_another_holds_the_job_does_nothing_and_says_who(self):
        provider_event("evt_old", just_outside(90))
        other = job_leases.claim_lease(name=retention.JOB, seconds=300)
        assert other is not None

        result = purge_expired()

        assert not result.ran and result.purged == ()
        assert result.held_by is not None and result.held_by.holder == other.holder
        assert ProviderEvent.objects.exists()

    def test_a_lease_whose_process_died_runs_out_and_the_next_run_takes_the_job(self):
        provider_event("evt_old", just_outside(90))
        dead = job_leases.claim_lease(name=retention.JOB, seconds=300)
        assert dead is not None
        # as if five minutes passed without its renewing it
        JobLease.objects.filter(pk=retention.JOB).update(
            leased_until=timezone.now() - timedelta(seconds=1)
        )

        result = purge_expired()

        assert result.ran and result.finished
        assert not ProviderEvent.objects.exists()
        lease = JobLease.objects.get(pk=retention.JOB)
        assert lease.holder == "" and lease.leased_until is None
        assert not job_leases.renew_lease(dead)  # the dead one can no longer renew it

    def test_the_lease_is_renewed_with_every_batch_so_nobody_else_can_claim_it(self):
        for n in range(4):
            provider_event(f"evt_{n}", just_outside(90 + n))
        seen: list[datetime] = []

        def between_batches(point: str) -> None:
            until = JobLease.objects.get(pk=retention.JOB).leased_until
            assert until is not None  # held
            seen.append(until)
            assert job_leases.claim_lease(name=retention.JOB, seconds=300) is None

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(faults, "checkpoint", between_batches)
            purge_expired(kinds=["provider_events"], pace=Pace(batch_size=1, lease_seconds=60))

        assert len(seen) == 4
        assert seen == sorted(seen) and len(set(seen)) == 4  # pushed on at each batch
        assert all(until > timezone.now() + timedelta(seconds=50) for until in seen)

    def test_a_run_that_lost_its_lease_stops_before_its_next_batch(self):
        for n in range(3):
            provider_event(f"evt_{n}", just_outside(90 + n))

        def taken_over(point):  # the lease ran out and another process claimed the job
            JobLease.objects.filter(pk=retention.JOB).update(
                holder="elsewhere:1:x", leased_until=timezone.now() + timedelta(minutes=5)
            )

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(faults, "checkpoint", taken_over)
            result = purge_expired(kinds=["provider_events"], pace=Pace(batch_size=1))

        assert result.lease_lost and not result.finished
        assert ProviderEvent.objects.count() == 2  # the first batch only
        assert JobLease.objects.get(pk=retention.JOB).holder == "elsewhere:1:x"


class TestDailySchedule:
    def test_runs_when_no_run_ever_finished_and_records_when_it_did(self):
        provider_event("evt_old", just_outside(90))

        result = purge_expired_if_due()

        assert result is not None and result.finished
        assert not ProviderEvent.objects.exists()
        finished_at = JobLease.objects.get(pk=retention.JOB).last_finished_at
        assert finished_at is not None
        assert timezone.now() - finished_at < timedelta(seconds=30)

    def test_does_not_run_again_within_a_day_of_the_last_whole_run(self):
        purge_expired_if_due()
        provider_event("evt_old", just_outside(90))

        assert purge_expired_if_due() is None
        assert ProviderEvent.objects.exists()

    def test_runs_again_once_a_day_has_passed(self):
        purge_expired_if_due()
        JobLease.objects.update(last_finished_at=timezone.now() - timedelta(days=1, minutes=1))
        provider_event("evt_old", just_outside(90))

        assert purge_expired_if_due() is not None
        assert not ProviderEvent.objects.exists()

    def test_a_slice_that_runs_out_of_time_is_taken_up_at_the_next_call(self):
        provider_event("evt_old", just_outside(90))

        cut_short = purge_expired_if_due(slice_seconds=0)
        assert cut_short is not None and not cut_short.finished
        assert ProviderEvent.objects.exists()
        assert JobLease.objects.get(pk=retention.JOB).last_finished_at is None
        goes_on = purge_expired_if_due()

        assert goes_on is not None and goes_on.finished
        assert not ProviderEvent.objects.exists()

    def test_a_whole_run_by_hand_counts_as_the_days_run_and_a_keys_only_run_does_not(self):
        purge_expired(kinds=["idempotency_keys"])
        assert purge_expired_if_due() is not None  # still due: only keys were purged
        JobLease.objects.update(last_finished_at=None)

        purge_expired()

        assert purge_expired_if_due() is None

    def test_a_worker_that_finds_another_one_running_it_leaves_it(self):
        provider_event("evt_old", just_outside(90))
        job_leases.claim_lease(name=retention.JOB, seconds=300)

        assert purge_expired_if_due() is None
        assert ProviderEvent.objects.exists()

    def test_the_claim_itself_checks_the_day_so_two_workers_run_it_once(self):
        """Two workers both read `due`; the one whose UPDATE comes second finds the day's
        run recorded by the first and claims nothing."""
        purge_expired_if_due()  # the first worker's run, finished

        late = job_leases.claim_lease(
            name=retention.JOB, seconds=300, finished_before=timezone.now() - retention.EVERY
        )

        assert late is None
