"""Several deliveries in flight per deliver_webhooks process (issue 44, "deliveries fall
behind"): lanes, each claiming batches of its own with SKIP LOCKED, on PostgreSQL with real
receivers, threads and processes. Slow receivers are served at once, up to the bound;
every delivery is still made once per endpoint and event; backoff and other workers'
leases hold; each lane's connection is closed; a kill or a stop mid-batch loses nothing."""

import signal
import threading
import time
import zlib
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from ledger_app.events.delivery import claim, deliver_due
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import Event, WebhookDelivery
from tests.processes import run_command
from tests.webhooks.conftest import record_events
from tests.webhooks.overlap import Overlap
from tests.webhooks.receiver import Answer
from tests.webhooks.workers import (
    Worker,
    duplicates_after_none_lost,
    stop_all,
    wait_until_all_delivered,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LOOPBACK = {"WEBHOOK_ALLOW_PRIVATE_URLS": "true"}
# Workers that wait for a held request instead of timing out (workers.FAST's 0.5 s), with a
# lease that still runs out within the test.
PATIENT = {"WEBHOOK_TIMEOUT_SECONDS": "3", "WEBHOOK_LEASE_SECONDS": "4"}


def endpoints_for(receivers) -> list[str]:
    return [create_endpoint(url=r.url, enabled_events=["*"]).pk for r in receivers]


def assert_each_delivered_once(overlap: Overlap, receivers, event_ids) -> None:
    """Every endpoint was sent every event exactly once, and each delivery recorded one
    attempt, delivered."""
    expected = {(r.port, e) for r in receivers for e in event_ids}
    assert set(overlap.acknowledged) == expected
    assert set(overlap.acknowledged.values()) == {1}
    assert set(WebhookDelivery.objects.values_list("status", "attempts")) == {("delivered", 1)}
    assert WebhookDelivery.objects.count() == len(expected)


@pytest.mark.parametrize(
    ("lanes", "args", "env"),
    [
        (4, (), {"WEBHOOK_DELIVERY_THREADS": "4"}),
        (3, ("--threads", "3"), {}),
        # Four in flight on a pool of two connections: a lane waiting on a receiver
        # holds none.
        (4, ("--threads", "4"), {"DATABASE_POOL_MAX_SIZE": "2"}),
    ],
    ids=["setting", "argument", "pool-of-two"],
)
def test_n_slow_receivers_are_served_at_once_never_more(allow_private, lanes, args, env):
    # Each receiver holds a request until `lanes` are held at once (at most 3 s): one
    # sender at a time would never have two held together.
    overlap = Overlap(together=lanes, hold=3)
    receivers = overlap.receivers(lanes)
    endpoints_for(receivers)
    record_events(1)  # two events (the charge's own first): 2 x lanes deliveries
    events = list(Event.objects.values_list("id", flat=True))

    try:
        ran = run_command(
            "deliver_webhooks", "--once", "--batch-size", "1", *args, timeout=120,
            env={**LOOPBACK, **env},
        )  # fmt: skip
    finally:
        for receiver in receivers:
            receiver.stop()

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[-1] == f"deliver_webhooks: {2 * lanes} delivered"
    assert overlap.peak == lanes  # all at once, and never more than the bound
    assert_each_delivered_once(overlap, receivers, events)


def test_several_workers_with_lanes_send_each_delivery_once(allow_private):
    overlap = Overlap(together=8, hold=0.3)
    receivers = overlap.receivers(3)
    endpoints_for(receivers)
    record_events(60, charges=5)
    events = list(Event.objects.values_list("id", flat=True))

    args = ("--threads", "4", "--batch-size", "5", "--poll-seconds", "0.1")
    workers = [Worker(*args, **PATIENT), Worker(*args, **PATIENT)]
    try:
        wait_until_all_delivered(timeout=90)
    finally:
        outputs = stop_all(workers)
        for receiver in receivers:
            receiver.stop()

    assert overlap.peak > len(workers), overlap.peak  # lanes, not only the two processes
    assert_each_delivered_once(overlap, receivers, events)
    assert "Traceback" not in "".join(outputs)


def fails_first_for_some(event_id: str, nth: int) -> Answer:
    return Answer(status=500 if nth == 1 and zlib.crc32(event_id.encode()) % 3 == 0 else 200)


def test_lanes_keep_backoff_and_other_workers_leases(endpoint, receiver):
    receiver.behaviour = fails_first_for_some
    record_events(20)
    _, theirs = claim(due_at=timezone.now(), size=3, lease_seconds=60)  # another worker's
    lanes_seen: set[str] = set()
    before = timezone.now()

    tally = deliver_due(
        threads=4,
        batch_size=2,
        on_attempt=lambda attempt: lanes_seen.add(threading.current_thread().name),
    )
    again = deliver_due(threads=4, batch_size=2)

    assert len(lanes_seen) > 1  # several lanes sent
    held = {d.pk for d in theirs}
    untouched = WebhookDelivery.objects.filter(pk__in=held)
    assert set(untouched.values_list("attempts", flat=True)) == {0}
    assert all(d.leased_until is not None and d.leased_until > timezone.now() for d in untouched)
    assert not {r.event_id for r in receiver.received} & {d.event_id for d in theirs}
    failing = {
        e
        for e in Event.objects.values_list("id", flat=True)
        if fails_first_for_some(e, 1).status == 500
    }
    retrying = WebhookDelivery.objects.exclude(pk__in=held).filter(event_id__in=failing)
    assert retrying.exists()
    for delivery in retrying:
        assert (delivery.status, delivery.attempts) == ("pending", 1)
        assert delivery.leased_until is None
        assert 54 <= (delivery.next_attempt_at - before).total_seconds() <= 67
    delivered = WebhookDelivery.objects.exclude(pk__in=held).exclude(event_id__in=failing)
    assert set(delivered.values_list("status", "attempts")) == {("delivered", 1)}
    assert sum(tally.statuses.values()) == WebhookDelivery.objects.count() - len(held)
    assert tally.statuses["retrying"] == retrying.count()
    assert not again.statuses  # backoff and the other worker's lease still hold
    assert receiver.acknowledged() == Counter({d.event_id: 1 for d in delivered})


def backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_each_lane_has_its_own_connection_and_closes_it(endpoint, receiver):
    record_events(40)
    idle = backends()
    seen: list[int] = []

    deliver_due(threads=4, batch_size=2, on_attempt=lambda attempt: seen.append(backends()))

    assert max(seen) >= idle + 3  # three lanes besides this thread's, each connected
    deadline = time.monotonic() + 5  # a closed connection's backend exits a moment later
    while backends() > idle and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backends() == idle  # each lane closed its connection when it ended
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}


def holding_the_first(count: int, gate: threading.Event):
    """A behaviour: the first `count` requests are held until `gate`; the rest answered."""
    held: list[str] = []

    def behaviour(event_id: str, nth: int) -> Answer:
        if len(held) < count:
            held.append(event_id)
            return Answer(hold=gate)
        return Answer()

    return behaviour, held


def test_a_worker_killed_with_every_lane_in_flight_loses_nothing(endpoint, receiver):
    gate = threading.Event()
    receiver.behaviour, held = holding_the_first(4, gate)
    record_events(20)
    killed = Worker("--threads", "4", "--batch-size", "2", "--poll-seconds", "0.1", **PATIENT)
    try:
        receiver.wait_for(4)  # four lanes, each with a request in flight
        killed.stop(signal.SIGKILL)
    finally:
        gate.set()  # answered, to a worker that is gone
    assert killed.process.returncode == -signal.SIGKILL
    in_flight = WebhookDelivery.objects.filter(event_id__in=held)
    assert set(in_flight.values_list("status", "attempts")) == {("pending", 0)}
    assert all(d.leased_until is not None for d in in_flight)  # sent again after the lease

    other = Worker()
    try:
        wait_until_all_delivered(timeout=60)
    finally:
        stop_all([other])

    acknowledged = receiver.acknowledged()
    assert duplicates_after_none_lost(acknowledged) == 4  # only the four in flight
    assert all(acknowledged[event_id] == 2 for event_id in held)
    assert set(in_flight.values_list("attempts", flat=True)) == {1}


def test_a_stop_finishes_every_delivery_in_hand_and_hands_back_the_rest(endpoint, receiver):
    gate = threading.Event()
    receiver.behaviour, held = holding_the_first(4, gate)
    record_events(20)  # 21 deliveries
    worker = Worker("--threads", "4", "--batch-size", "2", "--poll-seconds", "0.1", **PATIENT)
    try:
        receiver.wait_for(4)
        worker.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the lanes take nothing new while they wait
        assert len(receiver.received) == 4
    finally:
        gate.set()
    worker.process.wait(30)
    output = worker.stop()

    assert worker.process.returncode == 0, output
    assert "stopping: SIGTERM, finishing 4 deliveries in hand (at most 25 s)" in output, output
    assert "stopped: 4 deliveries finished, 4 claimed and handed back unsent, 0 left leased" in (
        output
    ), output
    assert output.splitlines()[-1] == "deliver_webhooks: 4 delivered"
    delivered = WebhookDelivery.objects.filter(status="delivered")
    assert set(delivered.values_list("event_id", flat=True)) == set(held)
    rest = WebhookDelivery.objects.exclude(status="delivered")
    assert rest.count() == 21 - 4
    assert rest.filter(status="pending", attempts=0, leased_until__isnull=True).count() == 17


def test_a_stop_past_its_bound_counts_every_delivery_left_in_hand(endpoint, receiver):
    gate = threading.Event()
    receiver.behaviour, held = holding_the_first(4, gate)
    record_events(20)
    worker = Worker(
        "--threads", "4", "--batch-size", "2", "--poll-seconds", "0.1", "--stop-seconds", "1",
        **PATIENT,
    )  # fmt: skip
    try:
        receiver.wait_for(4)
        worker.process.send_signal(signal.SIGTERM)
        worker.process.wait(30)
    finally:
        gate.set()
    output = worker.stop()

    assert worker.process.returncode == 128 + signal.SIGTERM, output
    assert "stopping: SIGTERM, finishing 4 deliveries in hand (at most 1 s)" in output, output
    assert (
        "stopped now: stop bound passed; 4 deliveries left in hand, leased: it is sent again"
        in output
    ), output
    in_flight = WebhookDelivery.objects.filter(event_id__in=held)
    assert set(in_flight.values_list("status", "attempts")) == {("pending", 0)}


def lanes_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("deliver-") and t.is_alive()]


class BrokenPipeOnce:
    """An on_attempt that fails in the main lane the first time (its output went away)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, attempt) -> None:
        self.seen.append(threading.current_thread().name)
        if (
            threading.current_thread() is threading.main_thread()
            and self.seen.count(threading.main_thread().name) == 1
        ):
            raise BrokenPipeError(32, "Broken pipe")


def assert_nothing_left_leased_or_sent_twice(receiver) -> None:
    assert not WebhookDelivery.objects.filter(leased_until__isnull=False).exists()
    assert all(n == 1 for n in Counter(r.event_id for r in receiver.received).values())
    sent = WebhookDelivery.objects.filter(attempts=1)
    assert sent.count() == len(receiver.received)
    assert not WebhookDelivery.objects.filter(attempts__gt=1).exists()


def test_a_crash_in_the_main_lane_stops_every_lane(endpoint, receiver):
    receiver.behaviour = lambda event_id, nth: Answer(delay=0.2)
    record_events(40)  # 41 deliveries: about 2 s over four lanes if none stopped
    on_attempt = BrokenPipeOnce()
    started = time.monotonic()

    with pytest.raises(BrokenPipeError):
        deliver_due(threads=4, batch_size=2, on_attempt=on_attempt)

    assert time.monotonic() - started < 1.5
    assert not lanes_alive()  # joined before the error came out
    assert len(set(on_attempt.seen)) > 1  # helper lanes were sending
    # Each lane finished the delivery in hand and handed its batch back: a few were sent,
    # not the backlog.
    assert len(receiver.received) <= 4 * 2, len(receiver.received)
    assert_nothing_left_leased_or_sent_twice(receiver)
    assert WebhookDelivery.objects.filter(attempts=0, status="pending").count() >= 41 - 8


class ThirdLaneWillNotStart(threading.Thread):
    def start(self) -> None:
        if self.name == "deliver-2":
            raise RuntimeError("can't start new thread")
        super().start()


def test_a_lane_that_cannot_start_stops_the_run_and_frees_the_first_batch(
    endpoint, receiver, monkeypatch
):
    receiver.behaviour = lambda event_id, nth: Answer(delay=0.2)
    record_events(40)
    monkeypatch.setattr(threading, "Thread", ThirdLaneWillNotStart)

    with pytest.raises(RuntimeError, match="can't start new thread"):
        deliver_due(threads=4, batch_size=2)

    assert not lanes_alive()  # the one that started was stopped and joined
    assert len(receiver.received) <= 1  # it finished the one in hand, if any
    assert_nothing_left_leased_or_sent_twice(receiver)  # the first batch handed back too


def test_a_receiver_that_trickles_its_answer_is_cut_off_and_sent_once(endpoint, receiver, settings):
    # One byte every 0.5 s, each well inside the 1.5 s timeout, 20 s for the whole answer:
    # a per-read timeout never fires. The lease (3 s) outlasts one whole request by the
    # margin; a second "worker" polls all along for the lease to run out.
    settings.WEBHOOK_TIMEOUT_SECONDS = 1.5
    receiver.behaviour = lambda event_id, nth: Answer(trickle=0.5)
    record_events(0)  # the charge's own event: one delivery
    attempts: list = []
    done = threading.Event()

    def first_worker() -> None:
        try:
            deliver_due(threads=2, lease_seconds=3, on_attempt=attempts.append)
        finally:
            done.set()
            connection.close()

    def second_worker() -> None:
        try:
            while not done.is_set():
                deliver_due(threads=2, lease_seconds=3)
                time.sleep(0.2)
        finally:
            connection.close()

    started = time.monotonic()
    first = threading.Thread(target=first_worker)
    first.start()
    receiver.wait_for(1)
    second = threading.Thread(target=second_worker)
    second.start()
    first.join(60)
    took = time.monotonic() - started
    second.join(60)

    assert took < 1.5 + 1.0, took  # given up within the whole-request deadline
    assert [(a.outcome, a.status_code, a.error) for a in attempts] == [
        ("retrying", None, "timed out after 1.5 s")
    ]
    assert len(receiver.received) == 1  # nobody sent it again while it was in flight
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.leased_until) == ("pending", 1, None)
