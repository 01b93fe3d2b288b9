"""Losing the primary under load loses nothing. Two web servers (one sends refunds inline,
one leaves them to two workers), a webhook deliverer and a bulk run work against the local
failover cluster through PgBouncer, while client threads refund with keys and retry what
is in doubt; the primary's postmaster is SIGKILLed mid-load. Patroni promotes the
synchronous standby, the old primary rejoins as a standby, and then every refund a client
was told of exists once, under its key, sent to the provider at most once, settled, booked,
and told to the webhook receiver. Then the synchronous standby is lost: writes wait and are
never acknowledged while it is away, reads go on, and the write completes when it returns.

Run by `make test-ha` (scripts/test-ha), on the cluster it starts."""

from __future__ import annotations

import csv
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from django.db import connection

from ledger_app.access.api_keys import create_api_key
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import Charge, Event, IdempotencyRecord, Refund, WebhookDelivery
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory
from tests.ha.cluster import Cluster
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import GunicornServer, run_command, start_command_logged

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 6
BEFORE_KILL = 4.0  # seconds of load before the primary is killed
AFTER_HEALTHY = 6.0  # and after the cluster has its synchronous standby again
IN_DOUBT = (409, 502, 503)  # a retry with the same key settles these
# Short leases and backoffs, so what the failover interrupts is taken up again in seconds.
QUICK = {
    "REFUND_DISPATCH_LEASE_SECONDS": "5",
    "WEBHOOK_LEASE_SECONDS": "5",
    "WEBHOOK_BACKOFF_SECONDS": "1",
    "WEBHOOK_BACKOFF_MAX_SECONDS": "2",
    "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    "WEBHOOK_TIMEOUT_SECONDS": "3",
}


@pytest.fixture(scope="module")
def whole_cluster() -> Cluster:
    found = Cluster.from_environment()
    found.wait(found.healthy, "a leader and a synchronous standby")
    return found


@pytest.fixture
def cluster(whole_cluster, transactional_db) -> Iterator[Cluster]:
    """The cluster, made whole again after each test, before its database is flushed."""
    yield whole_cluster
    whole_cluster.restore()


class Receiver(ThreadingHTTPServer):
    """A webhook receiver: every event id it is sent, counted."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.got: dict[str, int] = {}
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        event_id = json.loads(body)["id"]
        with self.server.lock:
            self.server.got[event_id] = self.server.got.get(event_id, 0) + 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@dataclass
class Asked:
    """One key's refund as its client saw it."""

    key: str
    charge: str
    amount: int
    answers: list[int] = field(default_factory=list)
    refund: str | None = None  # the id a 200 named
    told_at: float = 0.0  # time.monotonic() of the first 200
    sent_at: float = 0.0  # and of the request it answered


@dataclass
class Load:
    servers: list[str]
    secret: str
    charges: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    asked: list[Asked] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ask(self, asked: Asked, server: str, timeout: float = 30) -> int | None:
        """POST the refund once; the status, None when no answer came."""
        sent_at = time.monotonic()
        try:
            response = requests.post(
                f"{server}/v1/refunds",
                data={"charge": asked.charge, "amount": asked.amount},
                headers={
                    "Authorization": f"Bearer {self.secret}",
                    "Idempotency-Key": asked.key,
                },
                timeout=timeout,
            )
        except requests.RequestException:
            asked.answers.append(0)
            return None
        asked.answers.append(response.status_code)
        if response.status_code == 200:
            refund = response.json()["id"]
            if asked.refund not in (None, refund):
                self.unexpected.append(f"{asked.key}: {asked.refund} then {refund}")
            if not asked.told_at:
                asked.refund, asked.told_at, asked.sent_at = refund, time.monotonic(), sent_at
        elif response.status_code not in IN_DOUBT:
            self.unexpected.append(f"{asked.key}: {response.status_code} {response.text[:300]}")
        return response.status_code

    def client(self, number: int) -> None:
        rng = random.Random(number)
        count = 0
        while not self.stop.is_set():
            asked = Asked(f"ha-{number}-{count}", rng.choice(self.charges), rng.randint(1, 90))
            count += 1
            with self.lock:
                self.asked.append(asked)
            while not self.stop.is_set():
                status = self.ask(asked, self.servers[count % len(self.servers)])
                if status is not None and status not in IN_DOUBT:
                    break
                time.sleep(0.3)  # in doubt: the same key again, as the stripe clients do

    def settle_the_doubtful(self, deadline: float) -> None:
        for asked in self.asked:
            while asked.refund is None and time.monotonic() < deadline:
                status = self.ask(asked, self.servers[0])
                if status is not None and status not in IN_DOUBT:
                    break
                time.sleep(0.5)


def readiness(server: str, stop: threading.Event, seen: list[int]) -> None:
    """GET /readyz every 0.2 s; each status (0 for no answer in 2 s) in `seen`."""
    while not stop.is_set():
        try:
            seen.append(requests.get(f"{server}/readyz", timeout=2).status_code)
        except requests.RequestException:
            seen.append(0)
        time.sleep(0.2)


def bulk_file(path: Path, charges: list[str]) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["charge", "amount", "reason", "note"])
        for index, charge in enumerate(charges * 10):
            writer.writerow([charge, 7 + index % 5, "requested_by_customer", "ha bulk"])
    return path


def wait_for(done, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not in {timeout}s"
        time.sleep(0.5)
        connection.close()  # each look on a fresh connection: the old one may be dead


@pytest.mark.parametrize("loss", ["postgres_crashes", "machine_lost"])
def test_the_primary_killed_mid_load_loses_no_refund_and_sends_none_twice(
    cluster, receiver, tmp_path, settings, loss
):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # the receiver is on loopback
    create_endpoint(url=receiver.url, enabled_events=["*"])  # first: it hears of everything
    charges = [ChargeFactory(amount=1_000_000).pk for _ in range(12)]
    _, secret = create_api_key(name="ha clients")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    inline = GunicornServer(tmp_path / "a", workers=1, threads=8, env=QUICK)
    queued = GunicornServer(
        tmp_path / "b", workers=1, threads=8, env={**QUICK, "REFUND_DISPATCH": "worker"}
    )
    loop = ["--loop", "--poll-seconds", "0.2"]
    workers = [
        start_command_logged(tmp_path / f"worker{n}.log", "process_refunds", *loop, **QUICK)
        for n in range(2)
    ]
    deliverer = start_command_logged(tmp_path / "deliverer.log", "deliver_webhooks", *loop, **QUICK)
    load = Load([inline.url, queued.url], secret, charges)
    ready_seen: list[int] = []
    watching = threading.Event()
    try:
        inline.wait_ready()
        queued.wait_ready()
        threads = [threading.Thread(target=load.client, args=(n,)) for n in range(CLIENTS)]
        threads.append(threading.Thread(target=readiness, args=(inline.url, watching, ready_seen)))
        for thread in threads:
            thread.start()
        bulk_args = ["--batch-id", "ha", "--allow-repeats"]  # the clients refund these too
        bulk_csv = str(bulk_file(tmp_path / "bulk.csv", charges))
        bulk = start_command_logged(
            tmp_path / "bulk.log", "bulk_refund", bulk_csv, *bulk_args, **QUICK
        )
        time.sleep(BEFORE_KILL)

        old_primary = cluster.with_role("leader")
        assert old_primary is not None
        killed_at = time.monotonic()
        if loss == "postgres_crashes":
            cluster.kill_postgres(old_primary)  # its Patroni lives, and hands over at once
        else:
            cluster.stop_node(old_primary)  # the leader key lapses after its ttl
        promoted = cluster.wait(
            lambda: cluster.with_role("leader") not in (None, old_primary), "a new leader"
        )
        if loss == "machine_lost":
            # Strict mode: with no synchronous standby left, writes wait. The machine comes
            # back (or a new one in its place) and joins as the standby.
            time.sleep(2)
            cluster.start_node(old_primary)
        cluster.wait(cluster.healthy, "the old primary back as a synchronous standby")
        rejoined = time.monotonic() - killed_at
        time.sleep(AFTER_HEALTHY)
        load.stop.set()
        watching.set()
        for thread in threads:
            thread.join(60)
        load.settle_the_doubtful(time.monotonic() + 60)

        bulk.wait(120)
        if bulk.returncode != 0:  # interrupted by the failover: the same batch again
            rerun = run_command("bulk_refund", bulk_csv, *bulk_args, timeout=120)
            assert rerun.returncode == 0, rerun.stdout + rerun.stderr

        # Nothing left pending, reserved or unknown once the workers and one reconciler
        # pass have had their turn.
        def all_sent() -> bool:
            run_command("reconcile", timeout=60, env=QUICK)
            return not Refund.objects.filter(
                status__in=[Refund.Status.PENDING, Refund.Status.UNKNOWN]
            ).exists()

        wait_for(all_sent, "every refund sent and settled", timeout=120)
        wait_for(
            lambda: (
                not WebhookDelivery.objects.exclude(
                    status=WebhookDelivery.Status.DELIVERED
                ).exists()
            ),
            "every event delivered",
        )
    finally:
        load.stop.set()
        watching.set()
        for process in [*workers, deliverer]:
            process.terminate()
            process.wait(30)
        inline.stop()
        queued.stop()

    connection.close()
    asked = load.asked
    told = [a for a in asked if a.refund is not None]
    # What clients felt: the longest time without a refund answered, counted from the kill
    # (the kill itself the first point, so the wait for the first answer after it counts).
    answered = [killed_at, *sorted(a.told_at for a in told if a.told_at > killed_at)]
    gaps = [later - earlier for earlier, later in zip(answered, answered[1:], strict=False)]
    no_refund = max(gaps, default=float("inf"))
    # And when refunds flowed again: the end of that longest gap. (A 200 inside it can be a
    # refund reserved before the kill whose send then waited: answered `pending`.)
    flowing = answered[gaps.index(no_refund) + 1] - killed_at if gaps else float("inf")
    answers = sorted({s for a in asked for s in a.answers})
    print(
        f"\nfailover ({loss}): a new leader {promoted:.1f}s after the kill, no refund answered for "
        f"{no_refund:.1f}s at most, refunds flowing again {flowing:.1f}s after the kill, "
        f"the old primary a synchronous standby {rejoined:.1f}s "
        f"after it; {len(asked)} keys asked, {len(told)} answered; answers {answers}; "
        f"/readyz said {sorted(set(ready_seen))} (0: no answer in 2 s)"
    )
    assert load.unexpected == []
    assert any(a.sent_at > killed_at + promoted for a in told)  # refunds go on after
    assert 500 not in {s for a in asked for s in a.answers}
    assert set(ready_seen) <= {0, 200, 503}  # ready, not ready, or no answer: never a 500
    assert set(ready_seen) - {200}  # and it did not say ready all through
    assert len(told) == len(asked), [a.key for a in asked if a.refund is None]

    # Every key a client was told of names its refund, once; the refund is what was asked.
    records = {r.key: r for r in IdempotencyRecord.objects.filter(key__startswith="ha-")}
    for a in told:
        record = records[a.key]
        assert record.refund_id == a.refund, a.key
        refund = Refund.objects.get(pk=a.refund)
        assert (refund.charge_id, refund.amount) == (a.charge, a.amount), a.key
    keyed = Refund.objects.filter(idempotency_records__key__startswith="ha-").distinct().count()
    assert keyed == len(told)
    bulk_rows = len(charges) * 10
    assert IdempotencyRecord.objects.filter(key__startswith="bulk:ha:").count() == bulk_rows

    # Sent at most once each, the provider and the ledger agree, and the books hold.
    # (The simulated provider keeps its refunds in the same database: one it remembered
    # and the ledger forgot would be lost with the ledger's row. The told refunds above,
    # each found, are what shows nothing acknowledged was lost.)
    assert ProviderRefund.objects.count() == Refund.objects.count()
    assert not Refund.objects.exclude(status=Refund.Status.SUCCEEDED).exists()
    assert_provider_agrees()
    assert_ledger_invariants()
    verified = run_command("verify_ledger", timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for charge in Charge.objects.filter(pk__in=charges):
        live = sum(Refund.objects.filter(charge=charge).values_list("amount", flat=True))
        assert charge.amount_refunded == live

    # Every event reached the receiver.
    events = set(Event.objects.values_list("pk", flat=True))
    assert events and events <= set(receiver.got)


def test_without_its_synchronous_standby_a_write_waits_and_reads_go_on(cluster, tmp_path):
    charge = ChargeFactory(amount=10_000)
    _, secret = create_api_key(name="ha standby lost")
    server = GunicornServer(tmp_path, workers=1, threads=8)
    standby = cluster.with_role("sync_standby")
    assert standby is not None
    load = Load([server.url], secret, [charge.pk])
    try:
        server.wait_ready()
        cluster.stop_node(standby)  # the primary's commits now wait for it

        waiting = Asked("ha-standby-lost", charge.pk, 250)
        writer = threading.Thread(target=load.ask, args=(waiting, server.url, 60))
        writer.start()
        time.sleep(5)
        assert waiting.answers == []  # still waiting: not acknowledged with one copy

        read = requests.get(
            f"{server.url}/v1/charges/{charge.pk}",
            headers={"Authorization": f"Bearer {secret}"},
            timeout=10,
        )
        assert read.status_code == 200
        assert read.json()["amount_refunded"] == 0  # the waiting refund is not visible

        cluster.start_node(standby)
        cluster.wait(cluster.healthy, "the standby back")
        writer.join(60)
        assert waiting.answers == [200]
        retried = Asked("ha-standby-lost", charge.pk, 250)
        assert load.ask(retried, server.url) == 200
        assert retried.refund == waiting.refund
    finally:
        server.stop()

    connection.close()
    assert Refund.objects.filter(charge_id=charge.pk).count() == 1
    assert_provider_agrees()
    assert_ledger_invariants()
