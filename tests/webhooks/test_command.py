"""manage.py deliver_webhooks: a line per delivery, a summary, and its exit codes."""

import io
import signal
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command

from ledger_app.models import WebhookDelivery
from tests.processes import run_command, start_command
from tests.webhooks.conftest import record_events
from tests.webhooks.receiver import Answer

LOOPBACK = {"WEBHOOK_ALLOW_PRIVATE_URLS": "true"}


def deliver(*args: str) -> str:
    out = io.StringIO()
    call_command("deliver_webhooks", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_a_line_per_delivery_and_a_summary(endpoint, receiver):
    receiver.behaviour = lambda event_id, nth: Answer(status=500 if nth == 1 else 200)
    ids = record_events(2)

    first = deliver("--once").splitlines()

    assert len(first) == 4 and first[-1] == "deliver_webhooks: 3 retrying"
    assert first[1].startswith(f"{ids[0]} charge.succeeded -> {endpoint.id} retrying (HTTP 500)")
    assert "attempt 1; next at " in first[1]
    WebhookDelivery.objects.update(next_attempt_at=datetime(2000, 1, 1, tzinfo=UTC))
    second = deliver("--once").splitlines()
    assert second[-1] == "deliver_webhooks: 3 delivered"
    assert f"{ids[1]} charge.succeeded -> {endpoint.id} delivered (HTTP 200) attempt 2" in second
    assert deliver().strip() == "deliver_webhooks: nothing to do"


@pytest.mark.django_db
def test_no_answer_is_said_with_the_reason(endpoint, receiver):
    receiver.stop()
    record_events(1)

    lines = deliver().splitlines()

    assert "retrying (no answer) attempt 1: could not connect: connection refused" in lines[0]


@pytest.mark.django_db
def test_a_refused_loopback_receiver_is_its_own_outcome_with_the_way_out(
    endpoint, receiver, settings
):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False  # the endpoint was saved while allowed
    record_events(1)

    lines = deliver().splitlines()

    assert receiver.received == []
    assert (
        "refused (not sent) attempt 1: address 127.0.0.1 is loopback "
        "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it); next at "
    ) in lines[0]
    assert "no answer" not in lines[0] and "retrying" not in lines[0]
    assert lines[-1] == "deliver_webhooks: 2 refused"
    delivery = WebhookDelivery.objects.first()
    assert delivery is not None
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    assert delivery.last_error == (
        "refused: address 127.0.0.1 is loopback (set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
    )


@pytest.mark.django_db(transaction=True)
def test_a_refused_receiver_through_the_real_command(endpoint, receiver):
    record_events(1)

    ran = run_command("deliver_webhooks", "--once", WEBHOOK_ALLOW_PRIVATE_URLS="false")

    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "refused (not sent) attempt 1: address 127.0.0.1 is loopback" in lines[0]
    assert "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)" in lines[0]
    assert lines[-1] == "deliver_webhooks: 2 refused"
    assert receiver.received == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--batch-size", "0"), "--batch-size must be at least 1"),
        (("--lease-seconds", "10"), "--lease-seconds must be more than WEBHOOK_TIMEOUT_SECONDS"),
        (("--poll-seconds", "-1"), "--poll-seconds must not be negative"),
        (("--threads", "0"), "--threads must be from 1 to 64"),
        (("--threads", "65"), "--threads must be from 1 to 64"),
    ],
)
def test_bad_arguments_are_a_command_error(db, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("deliver_webhooks", *args)


@pytest.mark.django_db(transaction=True)
def test_a_failing_receiver_is_exit_0_and_bad_arguments_exit_1(endpoint, receiver):
    receiver.behaviour = lambda event_id, nth: Answer(status=500)
    record_events(1)

    ran = run_command("deliver_webhooks", "--once", env=LOOPBACK)
    refused = run_command("deliver_webhooks", "--batch-size", "0", env=LOOPBACK)

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1] == "deliver_webhooks: 2 retrying"
    assert refused.returncode == 1 and "--batch-size must be at least 1" in refused.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_loop_stops_on_a_signal_after_the_delivery_in_hand(endpoint, receiver, sig):
    receiver.behaviour = lambda event_id, nth: Answer(delay=1.0)
    record_events(1)
    worker = start_command(
        "deliver_webhooks", "--loop", "--poll-seconds", "0.1", WEBHOOK_TIMEOUT_SECONDS="5",
        **LOOPBACK,
    )  # fmt: skip
    try:
        receiver.wait_for(1)
        worker.send_signal(sig)
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()

    assert worker.returncode == 0, err
    assert f"stopping: {sig.name}, finishing 1 delivery in hand" in err
    assert out.splitlines()[-1] == "deliver_webhooks: 1 delivered"  # the one in hand
    statuses = sorted(WebhookDelivery.objects.values_list("status", flat=True))
    assert statuses == ["delivered", "pending"]
