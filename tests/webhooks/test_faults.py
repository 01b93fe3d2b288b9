"""Delivery under faults, with real deliver_webhooks processes on PostgreSQL: receivers
that fail, time out or are down for a while, and a worker killed mid-delivery. Every
event reaches the receiver at least once; none is lost."""

import signal
import threading
import time

import pytest

from ledger_app.models import WebhookDelivery
from tests import tally
from tests.webhooks.conftest import record_events
from tests.webhooks.receiver import Answer
from tests.webhooks.workers import (
    Worker,
    duplicates_after_none_lost,
    stop_all,
    wait_until_all_delivered,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EVENTS = 12


def fails_twice(event_id: str, nth: int) -> Answer:
    return Answer(status=500 if nth <= 2 else 200)


def first_attempt_hangs(event_id: str, nth: int) -> Answer:
    return Answer(delay=1.5 if nth == 1 else 0)  # past the workers' 0.5 s timeout


@pytest.mark.parametrize(
    ("behaviour", "down"),
    [(fails_twice, False), (first_attempt_hangs, False), (None, True)],
    ids=["answers-500", "times-out", "down-then-up"],
)
def test_every_event_is_delivered_despite_the_receiver(endpoint, receiver, behaviour, down):
    if behaviour:
        receiver.behaviour = behaviour
    if down:
        receiver.stop()  # connections refused
    record_events(EVENTS, charges=3)
    workers = [Worker(), Worker()]
    try:
        if down:
            # The workers try every delivery, fail and back off: the receiver comes up only
            # once each has failed (a wait, not a fixed pause that a loaded machine outruns).
            deadline = time.monotonic() + 60
            while WebhookDelivery.objects.filter(attempts=0).exists():
                assert time.monotonic() < deadline, "the workers never tried every delivery"
                time.sleep(0.05)
            receiver.start()
        wait_until_all_delivered(timeout=40)
    finally:
        outputs = stop_all(workers)

    duplicates = duplicates_after_none_lost(receiver.acknowledged())
    retried = WebhookDelivery.objects.filter(attempts__gt=1).count()
    assert retried == WebhookDelivery.objects.count()  # every one failed at least once first
    assert duplicates <= len(receiver.received)
    assert "Traceback" not in "".join(outputs)
    tally.add("webhooks", operations=len(receiver.received), faults=retried, invariant_checks=1)


def test_a_worker_killed_mid_delivery_is_covered_by_another(endpoint, receiver):
    hold = threading.Event()
    receiver.behaviour = lambda event_id, nth: Answer(hold=None if receiver.received else hold)
    record_events(EVENTS, charges=3)
    # One lane, so the held request is all it has in flight: with more, another lane's
    # delivery may be answered and not yet recorded when the kill comes, a second repeat
    # (tests/webhooks/test_delivery_concurrency.py kills a worker with every lane busy).
    killed = Worker("--threads", "1")
    try:
        receiver.wait_for(1)  # the first request is in flight and the receiver holds it
        held = receiver.received[0].event_id
        killed.stop(signal.SIGKILL)
    finally:
        hold.set()  # the receiver answers, to a worker that is gone
    assert killed.process.returncode == -signal.SIGKILL
    assert WebhookDelivery.objects.filter(leased_until__isnull=False).exists()  # still leased

    other = Worker()
    try:
        wait_until_all_delivered(timeout=30)
    finally:
        stop_all([other])

    acknowledged = receiver.acknowledged()
    duplicates = duplicates_after_none_lost(acknowledged)
    assert acknowledged[held] == 2  # got it, but its sender died before it could record that
    assert duplicates == 1
    assert WebhookDelivery.objects.get(event_id=held).attempts == 1  # the attempt that counted
    tally.add("webhooks", operations=len(receiver.received), faults=1, invariant_checks=1)
