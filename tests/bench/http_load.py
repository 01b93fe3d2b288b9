"""Refunds over HTTP against the serving model (gunicorn_server.py): only what a client
sees, status codes, each refund's `status` and latency.

Used by run.py's HTTP phases (phases_http.py) and admin_load.py.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from dataclasses import dataclass

import requests
from gunicorn_server import CpuShare


@dataclass(frozen=True)
class Call:
    began: float
    ended: float
    status_code: int  # 0: no answer (an exception; see refund_status)
    refund_status: str

    @property
    def seconds(self) -> float:
        return self.ended - self.began


class RefundLoad:
    """`clients` threads, each with its own requests.Session, posting `POST /v1/refunds`
    (amount 1, a fresh Idempotency-Key) on one of `charges` back to back until stopped:
    a closed loop, so exactly `clients` requests are in flight all along. The clients
    start spread over `stagger` seconds, so they do not all post at the same moment
    (clients started together stay in step, and then every refund lands in one burst)."""

    def __init__(self, base: str, key: str, charges: list[str], clients: int, stagger: float = 0.0):
        self.base, self.key, self.charges, self.clients = base, key, charges, clients
        self.stagger = stagger
        self.calls: list[Call] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n * stagger / clients,), daemon=True)
            for n in range(clients)
        ]

    def __enter__(self) -> RefundLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def stop(self) -> None:
        """Stop sending; wait for the answers to the requests in flight."""
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _client(self, delay: float) -> None:
        rng = random.Random()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.key}"
        self._stop.wait(delay)
        while not self._stop.is_set():
            with self._lock:
                self._in_flight += 1
            began = time.perf_counter()
            try:
                response = session.post(
                    f"{self.base}/v1/refunds",
                    data={"charge": rng.choice(self.charges), "amount": "1"},
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                    timeout=120,
                )
                code = response.status_code
                state = response.json().get("status", "?") if code == 200 else ""
            except (requests.RequestException, ValueError) as exc:
                code, state = 0, type(exc).__name__
            ended = time.perf_counter()
            with self._lock:
                self._in_flight -= 1
            self.calls.append(Call(began, ended, code, state))

    def ended_between(self, start: float, end: float) -> list[Call]:
        return [call for call in self.calls if start <= call.ended < end]


def outcomes(calls: list[Call]) -> dict:
    """Answers by refund status (200s) and by status code (the rest)."""
    counts: dict[str, int] = {}
    for call in calls:
        label = call.refund_status if call.status_code == 200 else f"http_{call.status_code}"
        counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items()))


def percentile_ms(seconds: list[float], fraction: float) -> float:
    """Nearest-rank percentile, in ms (p99 of 100 samples is the 99th, not the largest)."""
    if not seconds:
        return 0.0
    ordered = sorted(seconds)
    rank = min(len(ordered), max(1, math.ceil(len(ordered) * fraction - 1e-9)))
    return ordered[rank - 1] * 1000


@dataclass(frozen=True)
class Target:
    """Where refund posts go (`base`), with which API key, on which charges."""

    base: str
    key: str
    charges: list[str]

    def load(self, clients: int, stagger: float = 0.0) -> RefundLoad:
        return RefundLoad(self.base, self.key, self.charges, clients, stagger)


def inline_slow_provider(
    target: Target,
    cpu: CpuShare,
    *,
    clients: int,
    warm: float,
    seconds: float,
) -> dict:
    """Throughput and latency of `clients` back-to-back refund posts on charges whose
    provider answers slowly, over a window of `seconds` after `warm` seconds of the same
    load. Also where the CPU went, to show what limits the rate (the client is not)."""
    with target.load(clients, stagger=warm / 2) as load:
        time.sleep(warm)
        cpu.start()
        start = time.perf_counter()
        time.sleep(seconds)
        end, used = time.perf_counter(), cpu.stop()
    window = load.ended_between(start, end)
    latencies = [call.seconds for call in window]
    rate = len(window) / (end - start)
    mean = sum(latencies) / len(latencies) if latencies else 0.0
    non_200 = sum(1 for call in window if call.status_code != 200)
    return {
        "clients": clients,
        "per_second": rate,
        "p50_ms": percentile_ms(latencies, 0.50),
        "p99_ms": percentile_ms(latencies, 0.99),
        "mean_ms": mean * 1000,
        # Little's law: rate x mean latency = requests in flight. Near `clients` means the
        # clients kept every request slot busy (no client-side gap between requests).
        "in_flight_littles_law": rate * mean,
        "outcomes": outcomes(window),
        "non_200": non_200,
        "non_200_whole_run": sum(1 for call in load.calls if call.status_code != 200),
        "cpu_cores": used,
        # CPU per refund answered: the web tier's, and PostgreSQL's for this database.
        "gunicorn_cpu_ms_per_refund": used.get("gunicorn_cores", 0) / rate * 1000 if rate else 0,
        "postgres_cpu_ms_per_refund": used.get("postgres_cores", 0) / rate * 1000 if rate else 0,
    }
