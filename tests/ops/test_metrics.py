"""GET /metrics: the token, the database figures against rows the test made (in doubt by
state and age, the soonest approval expiry, the worker's and the webhooks' lag), readiness as
/readyz reports it, provider calls timed and their errors
counted, refunds created by source and outcome, API responses by status, a fixed number of
queries per scrape, and several processes' counters added up in multiprocess mode."""

from __future__ import annotations

import collections
import importlib.util
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from types import SimpleNamespace
from typing import NoReturn
from unittest import mock

import pytest
import requests
from django.db import OperationalError, connection, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ledger_app import errors
from ledger_app.access.api_keys import create_api_key
from ledger_app.approvals.services import approve_refund, reject_refund
from ledger_app.charges.services import create_charge
from ledger_app.events import services as events
from ledger_app.events.endpoints import create_endpoint
from ledger_app.metrics.database import AGE_BUCKETS, STATES
from ledger_app.models import (
    CustomerMail,
    EventType,
    Refund,
    RefundLimit,
    WebhookDelivery,
    WebhookEndpoint,
)
from ledger_app.provider.dispatch.reconcile import reconcile_refund
from ledger_app.provider.gateways.base import Gateway
from ledger_app.provider.gateways.instrumented import InstrumentedGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from serving import health
from tests.factories import ChargeFactory
from tests.processes import ROOT, GunicornServer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ledger_invariants")]

METRICS = "/metrics"
LEASE_SECONDS = 60
# Seconds a test may take between dating its rows and the scrape reading them.
SLACK = 30


def scrape(client, **headers) -> list:
    """Every sample of one scrape, parsed by prometheus_client itself."""
    response = client.get(METRICS, **headers)
    assert response.status_code == 200, response.content[:500]
    text = response.content.decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: list, name: str, **labels: str) -> float:
    """The one sample with exactly this name and these labels."""
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def series(samples: list, name: str) -> dict[tuple, float]:
    """name's samples by their labels (sorted label pairs)."""
    return {tuple(sorted(s.labels.items())): s.value for s in samples if s.name == name}


def delta(before: list, after: list, name: str) -> dict[tuple, float]:
    """What changed between two scrapes, by labels; series that did not change left out."""
    old, new = series(before, name), series(after, name)
    return {labels: v - old.get(labels, 0) for labels, v in new.items() if v != old.get(labels, 0)}


def labels(**pairs: str) -> tuple:
    return tuple(sorted(pairs.items()))


def refund_on(behaviour: str = "succeed", **arguments) -> Refund:
    charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": behaviour})
    return create_refund(RefundRequest(charge_id=charge.pk, amount=1_000, **arguments)).item


def dated(refund: Refund, age: timedelta, **fields) -> Refund:
    """Created `age` ago. update() leaves updated_at as it was (now), so the figures that
    follow can only have counted the age from created_at."""
    Refund.objects.filter(pk=refund.pk).update(created_at=timezone.now() - age, **fields)
    return refund


@pytest.fixture
def over_limit_agent(django_user_model):
    """A staff member whose refunds above 1 cent wait for someone else's approval."""
    agent = django_user_model.objects.create_user("agent", is_staff=True)
    RefundLimit.objects.create(user=agent, currency="usd", per_refund=1)
    return agent


@pytest.fixture
def approver(django_user_model):
    """Someone who may approve or reject other people's refunds."""
    return django_user_model.objects.create_superuser("approver", "approver@example.com", "x")


@pytest.fixture
def lease(settings):
    settings.REFUND_DISPATCH_LEASE_SECONDS = LEASE_SECONDS


class TestToken:
    def test_is_open_when_no_token_is_set(self, client, settings):
        settings.METRICS_TOKEN = ""

        samples = scrape(client)

        assert value(samples, "ledger_metrics_database_up") == 1

    @pytest.mark.parametrize(
        "header",
        [
            None,
            "Bearer wrong-token",
            "Bearer s3cret-metrics-token-extra",
            "Bearer s3cret-metrics-toke",
            "Basic s3cret-metrics-token",
            "s3cret-metrics-token",
            "Bearer ",
            "Bearer é-not-ascii-\u2603",
        ],
    )
    def test_refuses_a_missing_or_wrong_token_with_401(self, client, settings, header):
        settings.METRICS_TOKEN = "s3cret-metrics-token"
        extra = {} if header is None else {"HTTP_AUTHORIZATION": header}

        response = client.get(METRICS, **extra)

        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"ledger_" not in response.content

    def test_serves_the_right_token(self, client, settings):
        settings.METRICS_TOKEN = "s3cret-metrics-token"

        samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")

        assert value(samples, "ledger_metrics_database_up") == 1

    def test_is_never_cached_and_only_read(self, client, settings):
        settings.METRICS_TOKEN = ""

        read = client.get(METRICS)
        written = client.post(METRICS)

        assert "no-store" in read["Cache-Control"]
        assert written.status_code == 405


class TestRefundsInDoubt:
    def test_counts_each_state_by_age_from_the_database(
        self, client, settings, lease, over_limit_agent
    ):
        # (state the metrics should put it in, its age, the age bucket it belongs in)
        planned = [
            ("unknown", timedelta(minutes=2), "0-5m"),
            ("unknown", timedelta(minutes=20), "5m-1h"),
            ("unknown", timedelta(hours=3), "1h-24h"),
            ("unknown", timedelta(hours=30), "24h+"),
            ("unknown", timedelta(hours=50), "24h+"),
            ("stale_pending", timedelta(minutes=2), "0-5m"),
            ("stale_pending", timedelta(hours=2), "1h-24h"),
            ("awaiting_approval", timedelta(minutes=10), "5m-1h"),
            ("awaiting_approval", timedelta(days=2), "24h+"),
        ]
        settings.REFUND_DISPATCH = "inline"
        for state, age, _ in planned:
            if state == "unknown":
                refund = refund_on("timeout")
            elif state == "awaiting_approval":
                refund = refund_on(actor=over_limit_agent)
            else:
                settings.REFUND_DISPATCH = "worker"
                refund = refund_on()
                settings.REFUND_DISPATCH = "inline"
            assert refund.status == state.removeprefix("stale_")
            dated(refund, age)
        # Not in doubt: final, or pending with a sender on it or not yet past a lease.
        dated(refund_on("succeed"), timedelta(days=3))
        dated(refund_on("decline"), timedelta(days=3))
        settings.REFUND_DISPATCH = "worker"
        dated(refund_on(), timedelta(seconds=LEASE_SECONDS / 2))
        held = timezone.now() + timedelta(seconds=LEASE_SECONDS)
        dated(refund_on(), timedelta(hours=5), leased_until=held)

        samples = scrape(client)

        expected = collections.Counter((state, bucket) for state, _, bucket in planned)
        for state in STATES:
            for bucket, _ in AGE_BUCKETS:
                got = value(samples, "ledger_refunds_in_doubt", state=state, age=bucket)
                assert got == expected[state, bucket], (state, bucket)
            oldest = max(age for s, age, _ in planned if s == state).total_seconds()
            got = value(samples, "ledger_refunds_in_doubt_oldest_age_seconds", state=state)
            assert oldest <= got < oldest + SLACK, state

    def test_reports_zero_for_every_state_when_nothing_is_in_doubt(self, client, lease):
        refund_on("succeed")

        samples = scrape(client)

        for state in STATES:
            assert value(samples, "ledger_refunds_in_doubt_oldest_age_seconds", state=state) == 0
            for bucket, _ in AGE_BUCKETS:
                assert value(samples, "ledger_refunds_in_doubt", state=state, age=bucket) == 0

    def test_the_soonest_approval_expiry_is_the_first_refund_still_awaiting_approval(
        self, client, settings, lease, over_limit_agent, approver
    ):
        settings.REFUND_DISPATCH = "worker"
        now = timezone.now()
        expiries = {
            "later": now + timedelta(hours=30),
            "soonest": now + timedelta(hours=2),
            "approved": now + timedelta(minutes=10),  # pending now: no longer expires
            "rejected": now + timedelta(minutes=20),  # canceled
        }
        made = {}
        for name, expires_at in expiries.items():
            made[name] = refund_on(actor=over_limit_agent)
            Refund.objects.filter(pk=made[name].pk).update(approval_expires_at=expires_at)
        approve_refund(refund_id=made["approved"].pk, approver=approver)
        # Read by the same query as a stale pending refund, its old expiry still on the row.
        dated(made["approved"], timedelta(hours=2))
        reject_refund(refund_id=made["rejected"].pk, approver=approver, note="not owed")

        samples = scrape(client)

        soonest = value(samples, "ledger_refund_approval_soonest_expiry_timestamp_seconds")
        assert soonest == pytest.approx(expiries["soonest"].timestamp(), abs=0.001)
        waiting = value(samples, "ledger_refunds_in_doubt", state="awaiting_approval", age="0-5m")
        assert waiting == 2
        assert value(samples, "ledger_refunds_in_doubt", state="stale_pending", age="1h-24h") == 1

    def test_no_approval_expiry_is_reported_when_none_awaits(self, client, lease):
        refund_on("succeed")

        samples = scrape(client)

        assert not series(samples, "ledger_refund_approval_soonest_expiry_timestamp_seconds")

    def test_a_scrape_costs_the_same_few_queries_whatever_the_row_count(
        self, client, settings, lease, django_assert_max_num_queries
    ):
        def make_rows(count: int) -> None:
            for n in range(count):
                settings.REFUND_DISPATCH = "worker" if n % 2 else "inline"
                dated(refund_on("timeout"), timedelta(minutes=n * 7 + 2))
            charges = [ChargeFactory() for _ in range(count)]
            with transaction.atomic():
                for charge in charges:
                    events.record(EventType.CHARGE_SUCCEEDED, charge)

        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        create_endpoint(url="http://127.0.0.1:9/hook", enabled_events=["*"])
        make_rows(2)
        with CaptureQueriesContext(connection) as few:
            scrape(client)
        make_rows(30)

        # Five for the database figures (the books' days one of them, the customer mails
        # one), three for readiness (/readyz's SELECT 1, and the migrations table's presence
        # and rows): none grows with the rows.
        with django_assert_max_num_queries(8), CaptureQueriesContext(connection) as many:
            samples = scrape(client)

        assert len(many) == len(few)
        in_doubt = sum(series(samples, "ledger_refunds_in_doubt").values())
        assert in_doubt == 32
        # Every delivery made here is pending and due at once, to the one live endpoint.
        deliveries = WebhookDelivery.objects.count()
        assert deliveries >= 32
        assert value(samples, "ledger_webhook_deliveries_due") == deliveries

    def test_a_database_failure_is_a_zero_to_alert_on_not_a_500(self, client, monkeypatch):
        def fail(now):
            raise OperationalError("the database went away")

        monkeypatch.setattr("ledger_app.metrics.database.in_doubt_families", fail)

        samples = scrape(client)

        assert value(samples, "ledger_metrics_database_up") == 0
        assert not series(samples, "ledger_refunds_in_doubt")
        assert series(samples, "ledger_refunds_created_total")  # the counters still report


class TestReadiness:
    """Each scrape reports what GET /readyz would answer from the process scraped."""

    def readiness(self, client) -> tuple[dict, dict]:
        """(what /metrics says, what /readyz says) at the same moment."""
        samples = scrape(client)
        probe = client.get("/readyz")
        said = {
            "ready": value(samples, "ledger_ready"),
            "checks": {
                check: value(samples, "ledger_readiness_check", check=check)
                for check in ("database", "migrations")
            },
        }
        return said, {"ready": probe.status_code == 200, **probe.json()}

    def test_ready_when_the_database_answers_and_every_migration_is_applied(self, client):
        said, probe = self.readiness(client)

        assert said == {"ready": 1, "checks": {"database": 1, "migrations": 1}}
        assert probe["ready"]

    def test_not_ready_while_a_known_migration_is_not_recorded(self, client):
        MigrationRecorder(connection).record_unapplied("ledger_app", "0001_initial")

        said, probe = self.readiness(client)

        assert said == {"ready": 0, "checks": {"database": 1, "migrations": 0}}
        assert not probe["ready"] and probe["checks"]["migrations"] == "1 not applied"

    def test_not_ready_when_the_readiness_query_fails_and_the_scrape_still_answers(self, client):
        with mock.patch.object(health, "connection", wraps=connection) as broken:
            broken.cursor.side_effect = OperationalError("server closed the connection")
            said, probe = self.readiness(client)

        assert said == {"ready": 0, "checks": {"database": 0, "migrations": 0}}
        assert probe["checks"] == {"database": "unavailable", "migrations": "not checked"}


class TestQueues:
    def test_worker_lag_is_the_age_of_the_oldest_refund_waiting_to_be_sent(
        self, client, settings, lease, worker_dispatch, over_limit_agent
    ):
        dated(refund_on(), timedelta(seconds=30))
        dated(refund_on(), timedelta(minutes=10))
        # Older, but not the worker's to send: held by a sender, waiting for approval,
        # or already sent without an answer (the reconciler's).
        held = timezone.now() + timedelta(seconds=LEASE_SECONDS)
        dated(refund_on(), timedelta(hours=2), leased_until=held)
        dated(refund_on(actor=over_limit_agent), timedelta(hours=3))
        settings.REFUND_DISPATCH = "inline"
        dated(refund_on("timeout"), timedelta(hours=4))

        samples = scrape(client)

        assert value(samples, "ledger_refund_queue_length") == 2
        lag = value(samples, "ledger_refund_queue_oldest_age_seconds")
        assert 600 <= lag < 600 + SLACK

    def test_worker_lag_is_zero_when_nothing_waits(self, client, inline_dispatch):
        refund_on("succeed")

        samples = scrape(client)

        assert value(samples, "ledger_refund_queue_length") == 0
        assert value(samples, "ledger_refund_queue_oldest_age_seconds") == 0

    def test_webhook_lag_is_how_long_the_most_overdue_delivery_has_been_due(self, client, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        charge = ChargeFactory()
        live = create_endpoint(url="http://127.0.0.1:9/live", enabled_events=["*"])
        disabled = create_endpoint(url="http://127.0.0.1:9/off", enabled_events=["*"])
        with transaction.atomic():
            for _ in range(4):
                events.record(EventType.CHARGE_SUCCEEDED, charge)
        WebhookEndpoint.objects.filter(pk=disabled.pk).update(
            status=WebhookEndpoint.Status.DISABLED
        )
        now = timezone.now()
        # (due this long ago, held by a worker until): the first two are due and free
        plan = [
            (timedelta(minutes=12), None),
            (timedelta(minutes=3), None),
            (timedelta(minutes=-5), None),  # due in five minutes
            (timedelta(minutes=30), now + timedelta(minutes=1)),  # being delivered
        ]
        live_deliveries = list(WebhookDelivery.objects.filter(endpoint=live).order_by("id"))
        assert len(live_deliveries) == len(plan)
        for delivery, (overdue, leased_until) in zip(live_deliveries, plan, strict=True):
            WebhookDelivery.objects.filter(pk=delivery.pk).update(
                next_attempt_at=now - overdue, leased_until=leased_until
            )
        # A disabled endpoint's deliveries wait for it, however overdue.
        WebhookDelivery.objects.filter(endpoint=disabled).update(
            next_attempt_at=now - timedelta(hours=6)
        )

        samples = scrape(client)

        assert value(samples, "ledger_webhook_deliveries_due") == 2
        lag = value(samples, "ledger_webhook_delivery_lag_seconds")
        assert 12 * 60 <= lag < 12 * 60 + SLACK

    def test_mail_wait_is_how_long_the_oldest_unsent_mail_has_waited(self, client):
        assert value(scrape(client), "ledger_customer_mail_wait_seconds") == 0
        charge = ChargeFactory(receipt_email="ana@example.com")
        create_refund(RefundRequest(charge_id=charge.id, amount=100))  # made and succeeded
        create_refund(RefundRequest(charge_id=charge.id, amount=100))
        now = timezone.now()
        mails = list(CustomerMail.objects.order_by("id"))
        assert len(mails) == 4
        # written this long ago, and where each stands: the oldest was sent
        plan = [
            (timedelta(hours=2), CustomerMail.Status.SENT),
            (timedelta(minutes=40), CustomerMail.Status.PENDING),  # retrying later
            (timedelta(minutes=50), CustomerMail.Status.SENDING),
            (timedelta(minutes=5), CustomerMail.Status.PENDING),
        ]
        for mail, (age, status) in zip(mails, plan, strict=True):
            CustomerMail.objects.filter(pk=mail.pk).update(
                created_at=now - age, status=status, next_attempt_at=now + timedelta(minutes=9)
            )

        samples = scrape(client)

        assert value(samples, "ledger_customer_mails_waiting") == 3
        wait = value(samples, "ledger_customer_mail_wait_seconds")
        assert 50 * 60 <= wait < 50 * 60 + SLACK


class TestProviderCalls:
    def test_times_every_call_and_counts_errors_by_operation(self, client, inline_dispatch):
        before = scrape(client)

        for behaviour in ("succeed", "decline", "timeout"):
            refund_on(behaviour)
        applied = refund_on("apply_then_timeout")  # unknown; the lookup then finds it
        assert reconcile_refund(applied.pk).item.status == Refund.Status.SUCCEEDED
        create_charge(amount=500, currency="usd", metadata={"simulate_charge": "timeout"})

        after = scrape(client)
        calls = delta(before, after, "ledger_provider_call_duration_seconds_count")
        assert calls == {
            labels(operation="refund"): 4,
            labels(operation="lookup_refund"): 1,
            labels(operation="charge"): 1,
        }
        # A decline is the provider's answer, not an error; both timeouts are.
        assert delta(before, after, "ledger_provider_call_errors_total") == {
            labels(operation="refund", error="timeout"): 2,
            labels(operation="charge", error="timeout"): 1,
        }

    def test_the_histogram_holds_how_long_a_call_took(self, client, inline_dispatch, settings):
        settings.SIMULATED_GATEWAY_LATENCY_MS = 60
        before = scrape(client)

        refund_on("slow")

        after = scrape(client)
        took = delta(before, after, "ledger_provider_call_duration_seconds_sum")
        assert took[labels(operation="refund")] >= 0.06
        buckets = delta(before, after, "ledger_provider_call_duration_seconds_bucket")
        assert labels(operation="refund", le="0.05") not in buckets  # it slept 60 ms
        assert buckets[labels(operation="refund", le="+Inf")] == 1

    def test_an_unexpected_exception_is_counted_and_raised_unchanged(self, client):
        class Broken(Gateway):
            def not_called(self, **request: object) -> NoReturn:
                raise AssertionError("not called")

            refund = charge = lookup_charge = not_called

            def list_paid_out(self, payout_id) -> NoReturn:
                raise AssertionError("not called")

            def list_created(self, kind, *, start, end) -> NoReturn:
                raise AssertionError("not called")

            def lookup_refund(self, **request):
                raise KeyError("a bug in an adapter")

        before = scrape(client)

        with pytest.raises(KeyError, match="a bug in an adapter"):
            InstrumentedGateway(Broken()).lookup_refund(
                provider_key="k", charge_reference="ch_1", ledger_refund_id="re_1"
            )

        after = scrape(client)
        assert delta(before, after, "ledger_provider_call_errors_total") == {
            labels(operation="lookup_refund", error="unexpected"): 1
        }


class TestRefundsCreated:
    def test_counts_new_refunds_by_source_and_outcome_not_replays_or_refusals(
        self, client, settings, over_limit_agent
    ):
        Source = Refund.Source
        settings.REFUND_DISPATCH = "inline"
        before = scrape(client)

        made = [
            refund_on("succeed", source=Source.API, idempotency_key="k-1"),
            refund_on("succeed", source=Source.API),
            refund_on("decline", source=Source.BULK),
            refund_on("timeout", source=Source.CLI),
            refund_on(source=Source.ADMIN, actor=over_limit_agent),
        ]
        settings.REFUND_DISPATCH = "worker"
        made.append(refund_on(source=Source.SYSTEM))
        replay = create_refund(
            RefundRequest(
                charge_id=made[0].charge_id, amount=1_000, source=Source.API, idempotency_key="k-1"
            )
        )
        assert replay.replayed
        with pytest.raises(errors.LedgerError):
            create_refund(RefundRequest(charge_id=made[0].charge_id, amount=1, source=Source.API))

        after = scrape(client)
        expected = collections.Counter(
            labels(source=refund.source, outcome=refund.status) for refund in made
        )
        assert len({refund.status for refund in made}) == 5  # every outcome create can give
        assert delta(before, after, "ledger_refunds_created_total") == expected


class TestApiResponses:
    def test_counts_api_responses_by_status_and_view_and_nothing_else(self, client):
        secret = create_api_key(name="metrics test")[1]
        bearer = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
        charge = ChargeFactory(amount=1_000)
        form = "application/x-www-form-urlencoded"
        before = scrape(client)

        assert client.post("/v1/refunds", f"charge={charge.pk}", form, **bearer).status_code == 200
        assert client.post("/v1/refunds", f"charge={charge.pk}", form, **bearer).status_code == 400
        assert client.get("/v1/refunds").status_code == 401
        assert client.get("/v1/refunds", **bearer).status_code == 200
        assert client.get("/v1/no-such-thing", **bearer).status_code == 404
        assert client.get("/admin/login/").status_code == 200  # not the API

        after = scrape(client)
        assert delta(before, after, "ledger_api_responses_total") == {
            labels(status="200", view="refunds"): 2,
            labels(status="400", view="refunds"): 1,
            labels(status="401", view="refunds"): 1,
            labels(status="404", view="ledger_app.api.errors.not_found"): 1,
        }
        # django-prometheus's own view of the same responses, by method too.
        by_view = delta(before, after, "django_http_responses_total_by_status_view_method_total")
        assert by_view[labels(status="200", view="refunds", method="POST")] == 1
        assert by_view[labels(status="401", view="refunds", method="GET")] == 1


CHILD = textwrap.dedent(
    """
    import os, sys
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backoffice.settings")
    django.setup()
    from prometheus_client import Gauge
    from ledger_app import metrics

    for _ in range(int(sys.argv[1])):
        metrics.REFUNDS_CREATED.labels(source="api", outcome="succeeded").inc()
    metrics.observe_provider_call("refund", 0.2, "timeout")
    # A live gauge: the kind of file mark_process_dead removes when a worker dies.
    Gauge("child_alive", "test", multiprocess_mode="livesum").set(1)
    print(os.getpid())
    """
)


def run_child(directory, increments: int) -> int:
    """A separate process in multiprocess mode, counting into `directory`; its pid."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(increments)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout.split()[-1])


def gunicorn_hooks():
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "gunicorn.conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestMultiprocessMode:
    def test_adds_up_every_process_and_reads_the_database_once(
        self, client, tmp_path, monkeypatch, inline_dispatch, lease
    ):
        first, second = run_child(tmp_path, 3), run_child(tmp_path, 4)
        dated(refund_on("timeout"), timedelta(minutes=20))
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
        hooks = gunicorn_hooks()

        hooks.child_exit(None, SimpleNamespace(pid=first))
        samples = scrape(client)

        # This test process counts in memory, not in the directory: only the children's.
        created = value(samples, "ledger_refunds_created_total", source="api", outcome="succeeded")
        assert created == 3 + 4
        errors_total = "ledger_provider_call_errors_total"
        assert value(samples, errors_total, operation="refund", error="timeout") == 2
        # The dead worker's live gauge went; its counters stayed in the sum.
        assert value(samples, "child_alive") == 1
        assert not list(tmp_path.glob(f"gauge_livesum_{first}.db"))
        assert list(tmp_path.glob(f"gauge_livesum_{second}.db"))
        # Read once from the database, not once per process's files.
        assert value(samples, "ledger_refunds_in_doubt", state="unknown", age="5m-1h") == 1
        assert value(samples, "ledger_metrics_database_up") == 1

    def test_gunicorn_starts_each_run_with_an_empty_directory(self, tmp_path, monkeypatch):
        directory = tmp_path / "metrics"
        directory.mkdir()
        run_child(directory, 1)  # an earlier run's counters
        (directory / "notes.txt").write_text("not prometheus_client's")
        assert list(directory.glob("*.db"))
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))

        gunicorn_hooks().on_starting(None)

        assert [path.name for path in directory.iterdir()] == ["notes.txt"]

    def test_gunicorn_makes_the_directory_when_missing(self, tmp_path, monkeypatch):
        directory = tmp_path / "not-yet"
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))

        gunicorn_hooks().on_starting(None)

        assert directory.is_dir()


@pytest.mark.django_db(transaction=True)
def test_gunicorn_with_two_workers_reports_every_request_once_in_every_scrape(tmp_path):
    """`make run`'s server in multiprocess mode: whichever worker answers a scrape, it
    reports the requests both workers served (the aggregation itself is proven above)."""
    directory = tmp_path / "prometheus"
    calls = 12
    server = GunicornServer(tmp_path, workers=2, threads=2, PROMETHEUS_MULTIPROC_DIR=str(directory))
    try:
        server.wait_ready()
        unauthorized = {"status": "401", "view": "charges"}
        baseline = value(scrape_url(server.url), "ledger_api_responses_total", **unauthorized)
        # A new connection each, so either worker may take it; fewer than
        # API_AUTH_FAILURE_LIMIT (20 a minute), past which keyless calls could be 429s.
        for _ in range(calls):
            assert requests.get(f"{server.url}/v1/charges", timeout=10).status_code == 401

        totals = {
            value(scrape_url(server.url), "ledger_api_responses_total", **unauthorized)
            for _ in range(6)
        }
        pids = {path.stem.rsplit("_", 1)[-1] for path in directory.glob("counter_*.db")}
    finally:
        server.stop()

    assert totals == {baseline + calls}, server.log()
    assert len(pids) == 2  # both workers count into the directory


def scrape_url(url: str) -> list:
    response = requests.get(f"{url}{METRICS}", timeout=10)
    assert response.status_code == 200, response.text[:500]
    families = text_string_to_metric_families(response.text)
    return [sample for family in families for sample in family.samples]
