"""The bench's load, each worker in a process of its own (spawned: a fresh interpreter): the
limit's raw SQL, create_refund in Django, paced create_refund for the purge phase, and
`POST /v1/refunds` over HTTP; and starting them together and gathering what they measured."""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from databases import (
    HOT,
    SPREAD_CHARGES,
)
from limit import raw_refund

ROOT = Path(__file__).resolve().parents[2]


def charge_for(hot: bool, rng) -> str:
    return HOT if hot else f"ch_{rng.randint(1, SPREAD_CHARGES):020d}"


@dataclass
class Gate:
    """What run_processes' processes share: a barrier all start from, a queue for results."""

    barrier: Any
    results: Any


@dataclass
class Pacing:
    """What paced_worker's processes share with the parent: each says it is `ready`, starts
    at `go`, stops at `stop`, and puts its samples on `results`."""

    ready: Any
    go: Any
    stop: Any
    results: Any


def raw_worker(url, hot, seconds, gate: Gate, shape="statements"):
    """The refund's exact SQL shape, straight through psycopg: PostgreSQL's own limit."""
    import random

    rng = random.Random()
    conn = psycopg.connect(url)
    raw_refund(conn, charge_for(hot, rng), shape)  # warm up, as the service workers do
    gate.barrier.wait()
    done, latencies, deadline = 0, [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        raw_refund(conn, charge_for(hot, rng), shape)
        latencies.append(time.perf_counter() - began)
        done += 1
    conn.close()
    gate.results.put((done, latencies))


def django_setup(url: str, dispatch: str) -> None:
    os.environ.update(
        DATABASE_URL=url,
        REFUND_DISPATCH=dispatch,
        DJANGO_SETTINGS_MODULE="backoffice.settings",
        SIMULATED_GATEWAY_LATENCY_MS="0",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def service_worker(url, hot, seconds, gate: Gate, dispatch):
    import random

    django_setup(url, dispatch)
    from ledger_app.refunds.services import RefundRequest, create_refund

    rng = random.Random()
    create_refund(RefundRequest(charge_id=charge_for(hot, rng), amount=1, source="api"))  # warm up
    gate.barrier.wait()
    done, latencies, deadline = 0, [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        create_refund(
            RefundRequest(
                charge_id=charge_for(hot, rng),
                amount=1,
                idempotency_key=uuid.uuid4().hex,
                source="api",
            )
        )
        latencies.append(time.perf_counter() - began)
        done += 1
    gate.results.put((done, latencies))


def paced_worker(url, rate, offset, pacing: Pacing):
    """create_refund (inline, as production runs: sent and settled before it returns, the
    simulated provider answering at once) on spread charges at `rate` a second until
    `stop`, each due `offset` seconds into its interval after `go`; 0: back to back. Each sample is
    (due, seconds from due to done): a refund that started late because the one before it
    was slow counts its wait, as a client on a schedule would feel it."""
    import random

    django_setup(url, "inline")
    from ledger_app.refunds.services import RefundRequest, create_refund

    rng = random.Random()
    create_refund(
        RefundRequest(charge_id=charge_for(False, rng), amount=1, source="api")
    )  # warm up
    pacing.ready.put(os.getpid())
    pacing.go.wait()
    interval = 1 / rate if rate else 0.0
    due, samples = time.monotonic() + offset, []
    while not pacing.stop.is_set():
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        started = due if rate else time.monotonic()
        create_refund(
            RefundRequest(
                charge_id=charge_for(False, rng),
                amount=1,
                idempotency_key=uuid.uuid4().hex,
                source="api",
            )
        )
        ended = time.monotonic()
        samples.append((started, ended - started))
        due = due + interval if rate else ended
    pacing.results.put(samples)


def http_worker(base, key, seconds, gate: Gate):
    """POST /v1/refunds back to back on one kept-alive connection. The client is Python's
    own http.client rather than requests: the clients share the server's two cores, and
    requests spent about 2.8 ms of CPU a request (a quarter of the machine at 100/s) that
    a real client would spend on its own machine; http.client spends a fraction of it."""
    import http.client
    import random
    from urllib.parse import urlencode, urlsplit

    rng = random.Random()
    address = urlsplit(base)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/x-www-form-urlencoded",
    }

    def post(idempotency_key: str | None) -> int:
        body = urlencode({"charge": charge_for(False, rng), "amount": "1"})
        sent = dict(headers, **({"Idempotency-Key": idempotency_key} if idempotency_key else {}))
        conn.request("POST", "/v1/refunds", body=body, headers=sent)
        response = conn.getresponse()
        response.read()
        return response.status

    for _ in range(10):  # warm every worker's imports and connections before measuring
        post(None)
    gate.barrier.wait()
    done, latencies, errors, deadline = 0, [], 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        status = post(uuid.uuid4().hex)
        latencies.append(time.perf_counter() - began)
        if status != 200:
            errors += 1
        done += 1
    conn.close()
    gate.results.put((done, latencies, errors))


def run_processes(target, count, *args, tail=()):
    """Start `count` processes of target(*args, gate, *tail); gather results."""
    ctx = multiprocessing.get_context("spawn")
    gate = Gate(ctx.Barrier(count), ctx.Queue())
    procs = [ctx.Process(target=target, args=(*args, gate, *tail)) for _ in range(count)]
    for proc in procs:
        proc.start()
    return gather(gate.results, procs, target.__name__)


def gather(results, procs, name: str, timeout: float = 900) -> list:
    """One result from each process; fails fast if one of them dies without its result."""
    gathered: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(gathered) < len(procs):
        try:
            gathered.append(results.get(timeout=1))
        except queue.Empty:
            failed = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                raise RuntimeError(f"{name}: processes failed ({failed})") from None
    for proc in procs:
        proc.join(60)
    return gathered


def wait_ready(ready, procs, timeout: float = 300) -> None:
    """Until each of `procs` has said it is ready (they keep running: gather would join
    them); fails fast if one dies first."""
    count, deadline = 0, time.monotonic() + timeout
    while count < len(procs):
        try:
            ready.get(timeout=1)
            count += 1
        except queue.Empty:
            failed = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                raise RuntimeError(f"paced_worker: processes failed ({failed})") from None
