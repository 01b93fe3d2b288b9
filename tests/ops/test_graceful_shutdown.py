"""Graceful shutdown, as a rolling deploy does it: SIGTERM to gunicorn's master, to
`process_refunds --loop` and to `deliver_webhooks --loop` while each holds work, against
a slow provider or receiver. Each must stop taking work, finish what it holds within its
bound, say so, exit 0, and leave everything else claimable at once; the books agree
(docs/operating/deploys.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter

import pytest
import requests
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger_app.access.api_keys import create_api_key
from ledger_app.events import services as events
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import EventType, Refund, WebhookDelivery
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.ops.serving import ShippedGunicorn
from tests.processes import GunicornServer, run_command, start_command
from tests.webhooks.receiver import Answer, Receiver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

GRACEFUL_TIMEOUT = 10  # what GunicornServer passes to gunicorn
STOP_SECONDS = 8  # the workers' --stop-seconds here


def wait_until(condition, timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not after {timeout} s: {what}"
        time.sleep(0.02)


def stop(process: subprocess.Popen, sig: signal.Signals | None = signal.SIGTERM, *, began=None):
    """Signal it (unless `sig` is None: signalled at `began`), wait for it; (seconds from
    the signal until it exited, stdout, stderr)."""
    if sig is not None:
        began = time.monotonic()
        process.send_signal(sig)
    try:
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    return time.monotonic() - began, out, err


def sent_per_key() -> Counter:
    """How many refund requests reached the provider under each key."""
    keys = ProviderRequest.objects.filter(operation="refund")
    return Counter(keys.values_list("idempotency_key", flat=True))


def claimable_now() -> Q:
    return Q(status="pending", dispatch_attempts=0) & (
        Q(leased_until__isnull=True) | Q(leased_until__lte=timezone.now())
    )


def assert_books_agree() -> None:
    assert_ledger_invariants()
    assert_provider_agrees()
    verified = run_command("verify_ledger")
    assert verified.returncode == 0, verified.stdout + verified.stderr


# --- (a) gunicorn ---------------------------------------------------------------------

IN_FLIGHT = 12


@pytest.fixture
def web(transactional_db, tmp_path):
    server = GunicornServer(
        tmp_path,
        workers=2,
        threads=8,
        REFUND_DISPATCH="inline",
        REFUND_INLINE_WAIT_SECONDS="1",
        REFUND_SEND_THREADS="2",  # so that each process has sends queued behind running ones
        SIMULATED_GATEWAY_LATENCY_MS="1500",
        LOG_LEVEL="WARNING",
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_gunicorn_answers_every_accepted_request_and_exits_within_its_graceful_timeout(web):
    _, key = create_api_key(name="shutdown-test")
    charges = [
        ChargeFactory(amount=1_000, metadata={"simulate_refund": "slow"}) for _ in range(IN_FLIGHT)
    ]
    answers: dict[str, requests.Response | Exception] = {}
    start = threading.Barrier(IN_FLIGHT)

    def refund(charge_id: str) -> None:
        start.wait()
        try:
            answers[charge_id] = requests.post(
                f"{web.url}/v1/refunds",
                data={"charge": charge_id, "amount": "400"},
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"g-{charge_id}"},
                timeout=30,
            )
        except requests.RequestException as exc:
            answers[charge_id] = exc

    clients = [threading.Thread(target=refund, args=(c.id,)) for c in charges]
    for client in clients:
        client.start()
    # Every request accepted and its refund reserved; each waits on its send (1.5 s) now.
    wait_until(lambda: Refund.objects.count() == IN_FLIGHT, what="refunds reserved")

    took, _, _ = stop(web.process)
    for client in clients:
        client.join(30)

    # A complete answer for every request in flight: no reset, no 5xx.
    failed = {c: a for c, a in answers.items() if not isinstance(a, requests.Response)}
    responses = [a for a in answers.values() if isinstance(a, requests.Response)]
    assert failed == {} and len(responses) == IN_FLIGHT, failed
    assert [a.status_code for a in responses] == [200] * IN_FLIGHT
    assert {a.json()["status"] for a in responses} <= {"pending", "succeeded"}
    assert web.process.returncode == 0, web.log()
    assert took < GRACEFUL_TIMEOUT, f"the master took {took:.1f} s"
    print(f"gunicorn stopped in {took:.2f} s with {IN_FLIGHT} refunds in flight")

    # The sends running finished; the queued ones were dropped, claimable at once.
    settled_or_claimable = Q(status="succeeded") | claimable_now()
    assert Refund.objects.exclude(settled_or_claimable).count() == 0, list(
        Refund.objects.values("status", "dispatch_attempts", "leased_until")
    )
    assert max(sent_per_key().values(), default=1) == 1

    worker = run_command("process_refunds", "--once", SIMULATED_GATEWAY_LATENCY_MS="10")
    assert worker.returncode == 0, worker.stderr
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    assert set(sent_per_key().values()) == {1}
    assert ProviderRefund.objects.count() == IN_FLIGHT
    assert_books_agree()


# --- (b) process_refunds --loop -------------------------------------------------------

PENDING = 20
SLOW = {"SIMULATED_GATEWAY_LATENCY_MS": "1500"}


@pytest.fixture
def pending_refunds(settings):
    settings.REFUND_DISPATCH = "worker"  # create_refund leaves them for the worker
    charges = [ChargeFactory(amount=1_000, metadata={"simulate_refund": "slow"}) for _ in range(4)]
    for n in range(PENDING):
        create_refund(RefundRequest(charge_id=charges[n % 4].id, amount=100))
    assert Refund.objects.filter(status="pending").count() == PENDING


def in_hand() -> bool:
    """A refund is leased and waits on the provider (which logs a request when it answers)."""
    answered = ProviderRequest.objects.values("idempotency_key")
    leased = Refund.objects.filter(status="pending", leased_until__gt=timezone.now())
    return leased.exclude(provider_idempotency_key__in=answered).exists()


def start_worker(*args: str, **env: str) -> subprocess.Popen:
    return start_command(
        "process_refunds", "--loop", "--poll-seconds", "0.2", *args, **{**SLOW, **env}
    )


def test_process_refunds_finishes_the_refund_in_hand_and_leaves_the_rest_claimable(
    pending_refunds,
):
    worker = start_worker("--stop-seconds", str(STOP_SECONDS))
    try:
        wait_until(lambda: ProviderRequest.objects.count() >= 2 and in_hand(), what="sending")
    finally:
        took, out, err = stop(worker)

    assert worker.returncode == 0, err
    assert took < STOP_SECONDS, f"took {took:.1f} s"
    print(f"process_refunds stopped in {took:.2f} s")
    lines = err.splitlines()
    assert f"stopping: SIGTERM, finishing 1 refund in hand (at most {STOP_SECONDS} s)" in lines
    assert lines[-1] == "stopped: 1 refund finished, 0 left leased", err
    succeeded = Refund.objects.filter(status="succeeded").count()
    assert out.splitlines()[-1] == f"process_refunds: {succeeded} succeeded"
    # Nothing held: every refund is settled, or pending with no attempt and no live lease.
    assert 3 <= succeeded < PENDING
    assert Refund.objects.filter(claimable_now()).count() == PENDING - succeeded
    assert set(sent_per_key().values()) == {1} and sum(sent_per_key().values()) == succeeded

    rest = run_command("process_refunds", "--once", SIMULATED_GATEWAY_LATENCY_MS="10")

    assert rest.returncode == 0, rest.stderr
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    assert len(sent_per_key()) == PENDING and set(sent_per_key().values()) == {1}
    assert_books_agree()


@pytest.mark.parametrize("how", ["bound_passes", "second_signal"])
def test_process_refunds_cut_short_leaves_the_refund_in_hand_leased_then_looked_up(
    pending_refunds, how
):
    # A provider slower than the bound (1 s, or 8 s cut short by a second signal).
    bound = "1" if how == "bound_passes" else str(STOP_SECONDS)
    worker = start_worker(
        "--stop-seconds", bound, "--lease-seconds", "3", SIMULATED_GATEWAY_LATENCY_MS="9000"
    )
    began = time.monotonic()
    try:
        wait_until(in_hand, what="a refund in hand")
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        if how == "second_signal":
            time.sleep(0.3)  # this soon, the same request (a terminal's group, make's trap)
            worker.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            worker.send_signal(signal.SIGINT)  # not: it still counts as the first request
            assert worker.poll() is None
            time.sleep(0.6)
            worker.send_signal(signal.SIGINT)  # over a second after the first: stop now
    finally:
        took, _, err = stop(worker, None, began=began)

    assert worker.returncode == 128 + (signal.SIGTERM if how == "bound_passes" else signal.SIGINT)
    assert took < 3, f"took {took:.1f} s"
    why = "stop bound passed" if how == "bound_passes" else "SIGINT again"
    assert f"stopped now: {why}; 1 refund left in hand, leased: the attempt is on record" in err
    # Safe as a crash is: the attempt is on record, the lease holds off everyone else.
    held = Refund.objects.get(dispatch_attempts=1)
    assert held.leased_until is not None
    assert held.status == "pending" and held.leased_until > timezone.now()
    assert Refund.objects.filter(claimable_now()).count() == PENDING - 1
    assert not ProviderRefund.objects.exists()

    time.sleep(max((held.leased_until - timezone.now()).total_seconds(), 0) + 0.1)
    rest = run_command("process_refunds", "--once", SIMULATED_GATEWAY_LATENCY_MS="10")

    assert rest.returncode == 0, rest.stderr
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    held.refresh_from_db()
    assert held.dispatch_attempts == 2  # looked up first (no record), then sent
    assert ProviderRefund.objects.count() == PENDING
    assert len(sent_per_key()) == PENDING and set(sent_per_key().values()) == {1}
    assert_books_agree()


# --- (c) deliver_webhooks --loop ------------------------------------------------------

DUE = 20


HELD = threading.Event()


@pytest.fixture
def slow_receiver(settings):
    """Answers after 0.2 s; the fourth delivery it reads only once HELD is set."""
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    HELD.clear()
    read: list[str] = []

    def behaviour(event_id: str, nth: int) -> Answer:
        read.append(event_id)
        return Answer(hold=HELD) if len(read) == 4 else Answer(delay=0.2)

    receiver = Receiver(behaviour).start()
    yield receiver
    HELD.set()
    receiver.stop()


def test_deliver_webhooks_finishes_the_delivery_in_hand_and_hands_back_its_batch(slow_receiver):
    charge = ChargeFactory(amount=1_000)
    create_endpoint(url=slow_receiver.url, enabled_events=["*"])
    with transaction.atomic():
        recorded = {events.record(EventType.CHARGE_SUCCEEDED, charge).id for _ in range(DUE)}
    assert WebhookDelivery.objects.filter(status="pending").count() == DUE
    worker = start_command(
        "deliver_webhooks", "--loop", "--batch-size", "10", "--poll-seconds", "0.1",
        "--threads", "1",  # one lane: the stop with several is tests/webhooks' own
        "--stop-seconds", str(STOP_SECONDS), WEBHOOK_ALLOW_PRIVATE_URLS="true",
    )  # fmt: skip
    began = time.monotonic()
    try:
        slow_receiver.wait_for(4)  # the fourth is in hand, held by the receiver
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # it waits for the delivery in hand and sends nothing else
        assert len(slow_receiver.received) == 4
        HELD.set()
    finally:
        took, out, err = stop(worker, None, began=began)

    assert worker.returncode == 0, err
    assert took < STOP_SECONDS
    print(f"deliver_webhooks stopped in {took:.2f} s (0.5 s of it held by the receiver)")
    lines = err.splitlines()
    assert f"stopping: SIGTERM, finishing 1 delivery in hand (at most {STOP_SECONDS} s)" in lines
    assert lines[-1] == "stopped: 1 delivery finished, 6 claimed and handed back unsent, " + (
        "0 left leased"
    ), err
    assert out.splitlines()[-1] == "deliver_webhooks: 4 delivered"
    # Delivered means acknowledged by the receiver; the rest still pending, due, free.
    delivered = set(
        WebhookDelivery.objects.filter(status="delivered").values_list("event_id", flat=True)
    )
    assert delivered == set(slow_receiver.acknowledged()) and len(delivered) == 4
    rest = WebhookDelivery.objects.exclude(status="delivered")
    assert rest.count() == DUE - 4
    assert rest.filter(
        status="pending", attempts=0, leased_until__isnull=True, next_attempt_at__lte=timezone.now()
    ).count() == (DUE - 4)
    assert set(WebhookDelivery.objects.values_list("event_id", flat=True)) == recorded


# --- (d) gunicorn's master SIGKILLed --------------------------------------------------


# As started, and, when the tests run as root, with workers that change their group (to
# nogroup) as --user/--group make them: Linux clears the parent-death signal when a process
# changes its user or its group, which gunicorn's workers do after post_fork. (Only the
# group: a worker that became nobody could not read an interpreter installed under /root.)
AS_USERS = [pytest.param((), id="as-started")] + (
    [pytest.param(("--group", "65534"), id="in-another-group")] if os.geteuid() == 0 else []
)


@pytest.mark.parametrize("user_args", AS_USERS)
def test_workers_die_with_a_sigkilled_master_and_a_new_master_binds_at_once(
    transactional_db, tmp_path, user_args
):
    """An OOM kill or a supervisor that signals only the main process: the workers go with
    their master (gunicorn.conf.py's post_fork and post_worker_init), so the port is free
    for the next master at once. Before, orphaned workers holding connections kept the
    listening socket for the shipped graceful_timeout (25 s) and a new master gave up with
    "Connection in use"."""
    old = ShippedGunicorn(tmp_path / "old.log", *user_args, workers=2, threads=4)
    new = None
    held: list[socket.socket] = []
    try:
        old.wait_ready()
        wait_until(lambda: len(old.group()) == 3, what="the master and its 2 workers")
        workers = old.group() - {old.process.pid}
        # Connections each worker holds a thread for, as a busy server does.
        held = [socket.create_connection(("127.0.0.1", old.port)) for _ in range(4)]
        time.sleep(0.5)

        old.process.send_signal(signal.SIGKILL)
        old.process.wait(10)
        deadline = time.monotonic() + 3
        while workers & old.group() and time.monotonic() < deadline:
            time.sleep(0.05)
        orphans = workers & old.group()

        began = time.monotonic()
        new = ShippedGunicorn(tmp_path / "new.log", workers=1, threads=4, port=old.port)
        new.wait_ready(timeout=30)  # before: exited, "Connection in use" five times
        took = time.monotonic() - began
        assert "Connection in use" not in new.log(), new.log()
        assert orphans == set(), "workers outlived their master by 3 s"
        print(f"a new master answered on the same port {took:.1f} s after the old one died")
    finally:
        for connection in held:
            connection.close()
        for server in (old, new):
            if server is not None:
                server.stop()
