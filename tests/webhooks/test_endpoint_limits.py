"""Webhook endpoints are limited per API key and in all (issue 44, finding 2): every event
is written once per endpoint in its refund's transaction, so unlimited endpoints made
every refund slower and every event a flood of posts. Past a limit the create is refused
in Stripe's shape and writes nothing; disabled endpoints count, deleted ones do not; two
creates racing for the last place cannot both have it. And the fan-out itself is capped,
whatever the table holds (endpoints made before the limits, or a setting lowered since):
each event goes to the oldest WEBHOOK_ENDPOINTS_TOTAL enabled endpoints only, and the
check, the log and the admin say how many are left out."""

import json
import logging
from datetime import timedelta
from functools import partial

import pytest
from django.conf import settings
from django.core import checks
from django.db import connection, connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from ledger_app import errors
from ledger_app.access.api_keys import create_api_key
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import Event, WebhookDelivery, WebhookEndpoint
from tests.concurrency import run_at_once
from tests.factories import ChargeFactory
from tests.processes import manage_alone, run_command

pytestmark = pytest.mark.usefixtures("allow_private")

FORM = "application/x-www-form-urlencoded"
HOOK = "url=http%3A%2F%2F127.0.0.1%3A9%2Fhook&enabled_events[]=*"


def client_of(name: str) -> Client:
    """A test client speaking to /v1/ with a new read-write key of its own."""
    secret = create_api_key(name=name)[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def create(client: Client):
    return client.post("/v1/webhook_endpoints", HOOK, content_type=FORM)


@pytest.fixture
def limits(settings):
    """Small limits, so reaching them takes a few requests: 2 per key, 3 in all."""
    settings.WEBHOOK_ENDPOINTS_PER_KEY = 2
    settings.WEBHOOK_ENDPOINTS_TOTAL = 3
    return settings


def assert_refused_at_the_limit(response, *, naming: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "webhook_endpoint_limit_reached"
    assert "param" not in error
    assert naming in error["message"]


def test_the_defaults_are_stripes_16_per_key_and_32_in_all():
    assert (settings.WEBHOOK_ENDPOINTS_PER_KEY, settings.WEBHOOK_ENDPOINTS_TOTAL) == (16, 32)


@pytest.mark.parametrize(
    ("name", "value"),
    [("WEBHOOK_ENDPOINTS_PER_KEY", "0"), ("WEBHOOK_ENDPOINTS_TOTAL", "lots")],
)
def test_a_limit_that_is_not_a_count_stops_the_start(tmp_path, name, value):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key-0123456789-abcdefghijklmnop",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-written.sqlite3'}",
        name: value,
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"error: {name} must be a whole number of webhook endpoints")


@pytest.mark.django_db
class TestTheLimitPerKey:
    def test_a_key_past_its_limit_is_refused_and_nothing_is_written(self, limits):
        orders = client_of("orders")
        made = [create(orders) for _ in range(2)]

        refused = create(orders)

        assert [r.status_code for r in made] == [200, 200]
        assert_refused_at_the_limit(refused, naming="This API key already has 2")
        assert WebhookEndpoint.objects.count() == 2

    def test_another_key_still_has_its_own_places(self, limits):
        orders, billing = client_of("orders"), client_of("billing")
        create(orders), create(orders)

        response = create(billing)

        assert response.status_code == 200, response.content
        key = WebhookEndpoint.objects.get(pk=response.json()["id"]).api_key
        assert key is not None and key.name == "billing"

    def test_a_disabled_endpoint_still_counts(self, limits):
        orders = client_of("orders")
        first = create(orders).json()["id"]
        create(orders)
        disabled = orders.post(f"/v1/webhook_endpoints/{first}", "disabled=true", FORM)

        refused = create(orders)

        assert disabled.json()["status"] == "disabled"
        assert_refused_at_the_limit(refused, naming="This API key already has 2")

    def test_a_deleted_endpoint_frees_its_place(self, limits):
        orders = client_of("orders")
        first = create(orders).json()["id"]
        create(orders)
        assert orders.delete(f"/v1/webhook_endpoints/{first}").status_code == 200

        response = create(orders)

        assert response.status_code == 200, response.content
        assert WebhookEndpoint.objects.filter(deleted_at=None).count() == 2


@pytest.mark.django_db
class TestTheLimitInAll:
    def test_keys_together_past_the_total_are_refused(self, limits):
        orders, billing = client_of("orders"), client_of("billing")
        create(orders), create(orders), create(billing)

        refused = create(billing)

        assert_refused_at_the_limit(refused, naming="There are already 3 webhook endpoints")
        assert WebhookEndpoint.objects.count() == 3

    def test_the_back_office_itself_obeys_the_total(self, limits):
        for n in range(3):
            create_endpoint(url=f"http://127.0.0.1:9/{n}", enabled_events=["*"])

        with pytest.raises(errors.LedgerError) as refused:
            create_endpoint(url="http://127.0.0.1:9/one-more", enabled_events=["*"])

        assert refused.value.code == "webhook_endpoint_limit_reached"
        assert WebhookEndpoint.objects.count() == 3

    def test_endpoints_made_before_keys_were_recorded_count_in_all(self, limits):
        for n in range(3):
            WebhookEndpoint.objects.create(url=f"http://127.0.0.1:9/{n}", secret="whsec_x")

        assert_refused_at_the_limit(create(client_of("orders")), naming="There are already 3")


@pytest.mark.django_db(transaction=True)
def test_one_refund_writes_at_most_the_total_times_its_events_deliveries(limits):
    """With the limit full (three clients asked for three endpoints each, for every
    event), a refund's events are delivered to at most WEBHOOK_ENDPOINTS_TOTAL endpoints."""
    clients = [client_of(name) for name in ("orders", "billing", "audit")]
    answers = [create(client).status_code for client in clients for _ in range(3)]
    charge = ChargeFactory(amount=1_000)
    before = set(Event.objects.values_list("pk", flat=True))

    refund = clients[0].post("/v1/refunds", f"charge={charge.pk}&amount=100", FORM)

    assert refund.status_code == 200, refund.content
    events = list(Event.objects.exclude(pk__in=before).values_list("pk", flat=True))
    deliveries = WebhookDelivery.objects.filter(event_id__in=events).count()
    assert answers.count(200) == 3 and answers.count(400) == 6
    assert events
    assert deliveries == 3 * len(events)  # every endpoint asked for every event


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestRacingForTheLastPlace:
    """Creates at the same moment from real threads, each on its own connection."""

    def test_one_key_racing_itself_gets_the_last_place_once(self, settings):
        settings.WEBHOOK_ENDPOINTS_PER_KEY = 3
        settings.WEBHOOK_ENDPOINTS_TOTAL = 100
        secret = create_api_key(name="orders")[1]
        orders = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
        create(orders), create(orders)
        racers = [Client(HTTP_AUTHORIZATION=f"Bearer {secret}") for _ in range(6)]

        answers = run_at_once([partial(create, c) for c in racers])

        codes = sorted(a.status_code for a in answers)
        assert codes == [200, 400, 400, 400, 400, 400]
        assert WebhookEndpoint.objects.count() == 3

    def test_many_keys_racing_get_the_last_place_in_all_once(self, settings):
        settings.WEBHOOK_ENDPOINTS_PER_KEY = 16
        settings.WEBHOOK_ENDPOINTS_TOTAL = 3
        create(client_of("orders")), create(client_of("billing"))
        racers = [client_of(f"client {n}") for n in range(6)]

        answers = run_at_once([partial(create, c) for c in racers])

        codes = sorted(a.status_code for a in answers)
        assert codes == [200, 400, 400, 400, 400, 400]
        refusals = [json.loads(a.content)["error"]["code"] for a in answers if a.status_code == 400]
        assert set(refusals) == {"webhook_endpoint_limit_reached"}
        assert WebhookEndpoint.objects.count() == 3

    def test_a_create_that_waits_too_long_for_the_count_is_refused_and_writes_nothing(self):
        from ledger_app.events.endpoints import CREATE_LOCK

        holder = connections.create_connection("default")
        try:
            with holder.cursor() as held, connection.cursor() as waiting:
                held.execute("BEGIN")
                held.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(CREATE_LOCK))
                waiting.execute("SET lock_timeout = '200ms'")
                with pytest.raises(errors.LedgerError) as refused:
                    create_endpoint(url="http://127.0.0.1:9/hook", enabled_events=["*"])
                waiting.execute("RESET lock_timeout")
                held.execute("ROLLBACK")
        finally:
            holder.close()

        assert refused.value.code == "lock_timeout"  # 409 with Stripe-Should-Retry
        assert refused.value.param is None
        assert not WebhookEndpoint.objects.exists()


def endpoints_made_before_the_limits(count: int) -> list[str]:
    """`count` enabled endpoints for every event, inserted straight into the table as
    they were before the upgrade (no API key, no limit), a second apart: their ids, the
    oldest first. Inserted newest first, so the order is their age, not the insert's."""
    start = timezone.now() - timedelta(days=1)
    made = [
        WebhookEndpoint(
            url=f"http://127.0.0.1:9/{n}",
            enabled_events=["*"],
            secret="whsec_x",
            created_at=start + timedelta(seconds=n),
        )
        for n in range(count)
    ]
    WebhookEndpoint.objects.bulk_create(made[::-1])
    return [endpoint.pk for endpoint in made]


def refund_through_the_api(client: Client) -> dict[str, list[str]]:
    """A refund made through the API: the endpoints each of its events is to be sent to."""
    charge = ChargeFactory(amount=1_000)
    before = set(Event.objects.values_list("pk", flat=True))

    refund = client.post("/v1/refunds", f"charge={charge.pk}&amount=100", FORM)

    assert refund.status_code == 200, refund.content
    events = Event.objects.exclude(pk__in=before).values_list("pk", flat=True)
    sent_to: dict[str, list[str]] = {event: [] for event in events}
    deliveries = WebhookDelivery.objects.filter(event_id__in=list(sent_to))
    for event, endpoint in deliveries.values_list("event_id", "endpoint_id"):
        sent_to[event].append(endpoint)
    assert sent_to, "the refund recorded no event"
    return sent_to


@pytest.mark.django_db(transaction=True)
class TestTheFanOutIsCappedWhateverTheTableHolds:
    """Three times WEBHOOK_ENDPOINTS_TOTAL endpoints, as an install attacked before the
    upgrade holds them: each event still goes to the oldest WEBHOOK_ENDPOINTS_TOTAL."""

    def test_a_refund_writes_at_most_the_total_per_event_to_the_oldest(self, settings):
        settings.WEBHOOK_ENDPOINTS_TOTAL = 4
        ids = endpoints_made_before_the_limits(3 * 4)
        WebhookEndpoint.objects.filter(pk=ids[0]).update(status="disabled")
        WebhookEndpoint.objects.filter(pk=ids[1]).update(deleted_at=timezone.now())

        sent_to = refund_through_the_api(client_of("orders"))

        for endpoints in sent_to.values():
            assert sorted(endpoints) == sorted(ids[2:6])  # the oldest enabled four
        assert WebhookDelivery.objects.count() == 4 * Event.objects.count()  # the charge's too

    def test_lowering_the_setting_lowers_the_fan_out(self, settings):
        settings.WEBHOOK_ENDPOINTS_TOTAL = 4
        ids = endpoints_made_before_the_limits(3 * 4)
        orders = client_of("orders")
        at_four = refund_through_the_api(orders)

        settings.WEBHOOK_ENDPOINTS_TOTAL = 2
        at_two = refund_through_the_api(orders)

        assert all(sorted(sent) == sorted(ids[:4]) for sent in at_four.values())
        assert all(sorted(sent) == sorted(ids[:2]) for sent in at_two.values())

    def test_check_deploy_warns_naming_how_many_get_no_events(self):
        endpoints_made_before_the_limits(3 * 4)

        warned = run_command("check", "--deploy", WEBHOOK_ENDPOINTS_TOTAL="4")
        silent = run_command("check", "--deploy", WEBHOOK_ENDPOINTS_TOTAL="12")

        said = warned.stdout + warned.stderr
        assert "ledger_app.W260" in said, said
        assert "8 enabled webhook endpoints are past WEBHOOK_ENDPOINTS_TOTAL (4)" in said
        assert "ledger_app.W260" not in silent.stdout + silent.stderr

    def test_a_process_logs_one_warning_naming_how_many_get_no_events(
        self, settings, caplog, monkeypatch
    ):
        monkeypatch.setattr("ledger_app.events.checks._checked", False)
        settings.WEBHOOK_ENDPOINTS_TOTAL = 4
        endpoints_made_before_the_limits(3 * 4)
        orders = client_of("orders")

        with caplog.at_level(logging.WARNING, logger="ledger_app.webhooks"):
            refund_through_the_api(orders)
            refund_through_the_api(orders)

        warnings = [r.getMessage() for r in caplog.records if "get no events" in r.getMessage()]
        assert len(warnings) == 1, caplog.text
        assert warnings[0].startswith(
            "8 enabled webhook endpoints are past WEBHOOK_ENDPOINTS_TOTAL (4) and get no events"
        )

    def test_within_the_limit_nothing_is_said(self, settings, caplog, monkeypatch):
        monkeypatch.setattr("ledger_app.events.checks._checked", False)
        settings.WEBHOOK_ENDPOINTS_TOTAL = 4
        endpoints_made_before_the_limits(4)

        with caplog.at_level(logging.WARNING, logger="ledger_app.webhooks"):
            sent_to = refund_through_the_api(client_of("orders"))

        assert all(len(endpoints) == 4 for endpoints in sent_to.values())
        assert "get no events" not in caplog.text
        deploy = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.database])
        assert "ledger_app.W260" not in [message.id for message in deploy]


@pytest.mark.django_db
def test_the_admin_marks_the_endpoints_past_the_limit(admin_client, settings):
    settings.WEBHOOK_ENDPOINTS_TOTAL = 4
    ids = endpoints_made_before_the_limits(3 * 4)
    WebhookEndpoint.objects.filter(pk=ids[0]).update(status="disabled")

    page = admin_client.get(reverse("admin:ledger_app_webhookendpoint_changelist"))
    one = admin_client.get(reverse("admin:ledger_app_webhookendpoint_change", args=[ids[-1]]))

    html = page.content.decode()
    assert page.status_code == 200
    assert "7 enabled webhook endpoints are past WEBHOOK_ENDPOINTS_TOTAL (4)" in html
    assert html.count("no: past the limit (WEBHOOK_ENDPOINTS_TOTAL, 4)") == 7
    assert html.count("no: disabled") == 1
    assert "no: past the limit (WEBHOOK_ENDPOINTS_TOTAL, 4)" in one.content.decode()
