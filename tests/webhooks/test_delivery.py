"""Sending deliveries: what each answer (or none) records, backoff, giving up, leases."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.errors import DeliveryNotResendable
from ledger_app.events import delivery as webhook_delivery
from ledger_app.events.delivery import (
    backoff,
    claim,
    deliver_due,
    record,
)
from ledger_app.events.endpoints import (
    EndpointChanges,
    delete_endpoint,
    resend_delivery,
    update_endpoint,
)
from ledger_app.models import WebhookDelivery
from ledger_app.worker_parts import RunOutcomes
from tests.webhooks.conftest import record_events
from tests.webhooks.receiver import Answer, Receiver

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def answering(receiver: Receiver, **answer) -> None:
    receiver.behaviour = lambda event_id, nth: Answer(**answer)


def only_delivery() -> WebhookDelivery:
    """The one delivery of a test that recorded one event (the charge's own goes first)."""
    delivery = WebhookDelivery.objects.order_by("-id").first()
    assert delivery is not None
    return delivery


def test_a_2xx_is_delivered_once(endpoint, receiver):
    ids = record_events(2)

    first = deliver_due()
    second = deliver_due()

    assert dict(first.statuses) == {"delivered": 3} and not second.statuses
    assert receiver.acknowledged().keys() >= set(ids)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.leased_until is None


@pytest.mark.parametrize(
    ("answer", "status_code", "error"),
    [
        ({"status": 500}, 500, "HTTP 500; receiver said (first 64 bytes, escaped): ok"),
        (
            {"status": 302},
            302,
            "HTTP 302; receiver said (first 64 bytes, escaped): ok",
        ),  # redirects are not followed
        ({"status": 404}, 404, "HTTP 404; receiver said (first 64 bytes, escaped): ok"),
        ({"delay": 1.0}, None, "timed out after 0.3 s"),
    ],
    ids=["500", "redirect", "404", "timeout"],
)
def test_anything_but_a_2xx_is_retried_after_backoff(
    endpoint, receiver, settings, answer, status_code, error
):
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.3
    answering(receiver, **answer)
    record_events(1)
    before = timezone.now()

    tally = deliver_due()

    delivery = only_delivery()
    assert dict(tally.statuses) == {"retrying": 2}  # each tried once per run
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert (delivery.last_status_code, delivery.last_error) == (status_code, error)
    wait = (delivery.next_attempt_at - before).total_seconds()
    assert 54 <= wait <= 67, wait  # the first backoff: a minute, give or take a tenth
    assert delivery.leased_until is None


def test_a_receiver_that_is_down_is_retried(endpoint, receiver):
    receiver.stop()
    record_events(1)

    deliver_due()

    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    assert delivery.last_error == "could not connect: connection refused"


def test_due_again_after_backoff_then_delivered(endpoint, receiver, settings):
    settings.WEBHOOK_BACKOFF_SECONDS = 0.01
    receiver.behaviour = lambda event_id, nth: Answer(status=500 if nth < 3 else 204)
    record_events(1)

    runs: list[RunOutcomes] = []
    while WebhookDelivery.objects.filter(status="pending").exists() and len(runs) < 50:
        runs.append(deliver_due())

    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 204)
    assert delivery.last_error == ""


def test_given_up_once_older_than_the_retry_window(endpoint, receiver, settings):
    answering(receiver, status=503)
    record_events(1)
    old = timezone.now() - timedelta(hours=settings.WEBHOOK_RETRY_HOURS, seconds=1)
    WebhookDelivery.objects.update(created_at=old)

    tally = deliver_due()

    assert dict(tally.statuses) == {"failed": 2}
    assert set(WebhookDelivery.objects.values_list("status", "attempts")) == {("failed", 1)}


def test_backoff_doubles_up_to_the_maximum_with_jitter(settings):
    settings.WEBHOOK_BACKOFF_SECONDS, settings.WEBHOOK_BACKOFF_MAX_SECONDS = 60, 3600

    delays = [backoff(n).total_seconds() for n in range(1, 10)]
    many = {backoff(1).total_seconds() for _ in range(20)}

    for n, delay in enumerate(delays[:6]):
        assert 0.9 * 60 * 2**n <= delay <= 1.1 * 60 * 2**n
    assert all(3240 <= delay <= 3960 for delay in delays[6:])
    assert len(many) > 1
    assert backoff(10_000).total_seconds() <= 3960


def test_a_disabled_endpoint_is_sent_nothing_until_enabled(endpoint, receiver):
    update_endpoint(endpoint.pk, EndpointChanges(disabled=True))
    record_events(1)  # recorded while disabled: no delivery

    assert not deliver_due().statuses
    update_endpoint(endpoint.pk, EndpointChanges(disabled=False))
    record_events(1)

    assert dict(deliver_due().statuses) == {"delivered": 2}


def test_another_workers_lease_is_respected_until_it_runs_out(endpoint, receiver):
    record_events(1)
    lease, held = claim(due_at=timezone.now(), size=10, lease_seconds=60)

    assert len(held) == 2 and not deliver_due().statuses
    WebhookDelivery.objects.update(leased_until=timezone.now() - timedelta(seconds=1))
    assert dict(deliver_due().statuses) == {"delivered": 2}
    # The first worker comes back late: it no longer holds them and records nothing.
    assert record(held[0], lease, 200, "").outcome == "superseded"


def test_a_stopped_worker_hands_back_what_it_did_not_send(endpoint, receiver):
    record_events(4)
    stops = iter([False, False, True])

    tally = deliver_due(batch_size=10, should_stop=lambda: next(stops, True))

    assert dict(tally.statuses) == {"delivered": 1}
    assert not WebhookDelivery.objects.filter(status="pending", leased_until__isnull=False)
    assert WebhookDelivery.objects.filter(status="pending").count() == 4


def test_resend_puts_a_delivery_back_in_the_queue(endpoint, receiver):
    record_events(1)
    deliver_due()
    delivery = only_delivery()

    resent = resend_delivery(delivery.pk)
    deliver_due()

    assert resent.status == "pending" and resent.next_attempt_at <= timezone.now()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert receiver.acknowledged()[delivery.event_id] == 2


def test_a_deleted_endpoints_delivery_is_not_resent(endpoint):
    record_events(1)
    delete_endpoint(endpoint.pk)

    with pytest.raises(DeliveryNotResendable):
        resend_delivery(only_delivery().pk)

    assert only_delivery().status == "canceled"


def test_a_delivery_that_cannot_be_prepared_does_not_stop_the_others(
    endpoint, receiver, monkeypatch
):
    bad = record_events(3)[1]
    real_render = webhook_delivery.render

    def render(event, version):
        if event.id == bad:
            raise KeyError("a bug")
        return real_render(event, version)

    monkeypatch.setattr(webhook_delivery, "render", render)

    tally = deliver_due()

    assert dict(tally.statuses) == {"delivered": 3, "retrying": 1}
    failed = WebhookDelivery.objects.get(event_id=bad)
    assert (failed.status, failed.attempts) == ("pending", 1)
    assert failed.last_error == "not sent: internal error (KeyError)"
