"""A slow or dead receiver never delays a refund: the refund's transaction only writes its
deliveries, and the worker that sends them holds no lock a refund needs."""

import signal
import threading
import time

import pytest

from ledger_app.models import Event, WebhookDelivery
from tests.factories import ChargeFactory
from tests.processes import run_command, start_command
from tests.webhooks.conftest import record_events
from tests.webhooks.receiver import Answer

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ENV = {
    "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    "WEBHOOK_TIMEOUT_SECONDS": "30",
    "WEBHOOK_LEASE_SECONDS": "120",
}


def test_a_refund_completes_while_a_receiver_hangs(
    stripe_client, endpoint, receiver, inline_dispatch
):
    charge = ChargeFactory(amount=5_000)
    hold = threading.Event()
    receiver.behaviour = lambda event_id, nth: Answer(hold=hold)
    record_events(3)
    worker = start_command("deliver_webhooks", "--loop", "--batch-size", "50", **WORKER_ENV)
    try:
        receiver.wait_for(1)  # the worker is stuck on a receiver that does not answer
        started = time.monotonic()
        refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 500})
        took = time.monotonic() - started
        waiting = WebhookDelivery.objects.filter(event__refund_id=refund.id, status="pending")
        assert waiting.count() >= 2  # refund.created and charge.refunded, written, not sent
    finally:
        hold.set()
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)

    assert refund.status == "succeeded"
    assert took < 3, f"the refund took {took:.1f} s"
    assert run_command("deliver_webhooks", "--once", env=WORKER_ENV).returncode == 0
    assert set(receiver.acknowledged()) == set(Event.objects.values_list("id", flat=True))
