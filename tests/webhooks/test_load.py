"""A bounded load run on PostgreSQL: thousands of events recorded while several
deliver_webhooks processes send them, some answered 500 the first time, and every worker
SIGKILLed partway, one of them mid-request (what they held is sent again after their
leases), then replaced. Prints what was delivered and how many repeats."""

import signal
import threading
import time
import zlib

import pytest

from ledger_app.models import Event, WebhookDelivery
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

EVENTS = tally.scale("webhook_events", ci=1_000, soak=20_000)
WORKERS = 3
CHUNK = 100  # events per recording transaction


class Crash:
    """The receiver answers one event in fifty with a 500 the first time; once armed, it
    holds the next request it reads until every worker has been SIGKILLed, so at least
    one dies with a request in flight (the others with whatever batch they leased)."""

    def __init__(self) -> None:
        self.armed = False
        self.in_flight = threading.Event()  # the held request has arrived
        self.killed = threading.Event()

    def __call__(self, event_id: str, nth: int) -> Answer:
        if self.armed and not self.in_flight.is_set():  # the receiver calls this under a lock
            self.in_flight.set()
            return Answer(hold=self.killed)  # taken (200), but its sender will not know
        fails = nth == 1 and zlib.crc32(event_id.encode()) % 50 == 0
        return Answer(status=500 if fails else 200)

    def kill_every_worker(self, workers: list[Worker]) -> list[Worker]:
        try:
            assert self.in_flight.wait(30), "no request arrived to hold"
            for worker in workers:
                worker.stop(signal.SIGKILL)
        finally:
            self.killed.set()
        return [new_worker() for _ in workers]


def new_worker() -> Worker:
    return Worker("--batch-size", "20", "--poll-seconds", "0.2")


def test_thousands_of_events_delivered_at_least_once_none_lost(endpoint, receiver):
    receiver.behaviour = crash = Crash()
    started = time.monotonic()
    workers = [new_worker() for _ in range(WORKERS)]
    try:
        for done in range(0, EVENTS, CHUNK):
            crash.armed = done // CHUNK == EVENTS // CHUNK // 3
            record_events(min(CHUNK, EVENTS - done), charges=5)
            if crash.armed:
                workers = crash.kill_every_worker(workers)
        recorded = time.monotonic() - started
        wait_until_all_delivered(timeout=90)
        seconds = time.monotonic() - started
    finally:
        stop_all(workers)

    acknowledged = receiver.acknowledged()
    duplicates = duplicates_after_none_lost(acknowledged)
    events = Event.objects.count()
    deliveries = WebhookDelivery.objects.count()
    refused = sum(1 for r in receiver.received if r.status == 500)
    print(
        f"\nwebhook load: {events} events, {deliveries} deliveries all delivered, "
        f"{len(receiver.received)} requests received ({refused} answered 500 and retried), "
        f"{duplicates} duplicates, {WORKERS} workers (all SIGKILLed partway, one mid-request, "
        f"and replaced), "
        f"{seconds:.1f} s in all, the last delivered {seconds - recorded:.1f} s after the "
        f"last event was recorded"
    )
    assert deliveries == events >= EVENTS
    assert refused > 0
    assert 1 <= duplicates <= WORKERS * 20  # the request in flight; at most the killed batches
    tally.add("webhooks", operations=len(receiver.received), faults=refused + WORKERS)
