"""`make bench-ha`: what RPO 0 costs, on the local failover cluster (scripts/ha-cluster,
started and stopped here). The same refunds (create_refund, inline, the simulated provider
answering at once, spread charges) from --clients processes, in alternating rounds:
each commit waiting for the synchronous standby (the cluster's synchronous_commit on), and
committed on the primary alone (synchronous_commit local, set for these sessions only).
Prints p50 and p99 per refund and refunds a second for each, the ratios, and what one
commit alone takes each way (one row inserted, straight through psycopg).

    python tests/bench/ha_latency.py [--clients 2] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from databases import MAIN_DB, fresh_database, load_main
from workers import Gate, charge_for, django_setup, gather

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ha-cluster"
VARIANTS = {"synchronous standby": "on", "primary alone": "local"}


def refund_worker(url, seconds, commit_mode, gate: Gate):
    """create_refund back to back for `seconds`, each commit of this session with
    synchronous_commit = `commit_mode`; (count, latencies) on the gate's queue."""
    django_setup(url, "inline")
    from django.db import connection

    from ledger_app.refunds.services import RefundRequest, create_refund

    connection.ensure_connection()  # kept for the whole run (CONN_MAX_AGE), a direct one
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('synchronous_commit', %s, false)", [commit_mode])
    rng = random.Random()
    create_refund(RefundRequest(charge_id=charge_for(False, rng), amount=1, source="api"))
    gate.barrier.wait()
    latencies, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        create_refund(
            RefundRequest(
                charge_id=charge_for(False, rng),
                amount=1,
                idempotency_key=uuid.uuid4().hex,
                source="api",
            )
        )
        latencies.append(time.perf_counter() - began)
    gate.results.put((len(latencies), latencies))


def measure(url: str, clients: int, seconds: float, commit_mode: str) -> tuple[int, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    gate = Gate(ctx.Barrier(clients), ctx.Queue())
    procs = [
        ctx.Process(target=refund_worker, args=(url, seconds, commit_mode, gate))
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    results = gather(gate.results, procs, "refund_worker")
    return sum(count for count, _ in results), [t for _, lat in results for t in lat]


def commit_latencies(url: str, seconds: float, commit_mode: str) -> list[float]:
    """One row inserted and committed at a time, straight through psycopg: what a commit
    alone costs, with `synchronous_commit` = `commit_mode` for this session."""
    latencies = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('synchronous_commit', %s, false)", [commit_mode])
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (id bigserial PRIMARY KEY)")
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            conn.execute("INSERT INTO bench_commit DEFAULT VALUES")
            latencies.append(time.perf_counter() - began)
    return latencies


def p(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100)[q - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="backoffice-ha-bench-"))
    subprocess.run([sys.executable, str(SCRIPT), "up", "--dir", str(directory)], check=True)
    try:
        state = json.loads((directory / "cluster.json").read_text())
        # Straight to the primary through HAProxy (no pooler): each worker's session keeps
        # its synchronous_commit for the whole run.
        server = {"host": "127.0.0.1", "port": state["primary_port"], "user": "postgres"}
        url = fresh_database(server, MAIN_DB)
        load_main(url, 0)
        seen: dict[str, list[float]] = {name: [] for name in VARIANTS}
        commits: dict[str, list[float]] = {name: [] for name in VARIANTS}
        counts: dict[str, int] = dict.fromkeys(VARIANTS, 0)
        for _ in range(args.rounds):
            for name, mode in VARIANTS.items():
                commits[name].extend(commit_latencies(url, args.seconds / 2, mode))
                count, latencies = measure(url, args.clients, args.seconds, mode)
                counts[name] += count
                seen[name].extend(latencies)
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "down", "--dir", str(directory)], check=False)

    total = args.rounds * args.seconds
    print(f"\ncreate_refund, {args.clients} clients, {args.rounds} rounds of {args.seconds} s each")
    rows = {}
    for name in VARIANTS:
        p50, p99, rate = p(seen[name], 50), p(seen[name], 99), counts[name] / total
        rows[name] = (p50, p99, rate)
        print(f"{name:>20}: p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  {rate:6.0f}/s")
    for name in VARIANTS:
        print(
            f"{name:>20}: one commit alone: p50 {p(commits[name], 50):6.2f} ms  "
            f"p99 {p(commits[name], 99):6.2f} ms"
        )
    on, alone = rows["synchronous standby"], rows["primary alone"]
    print(
        f"{'cost of RPO 0':>20}: p50 x{on[0] / alone[0]:.2f}  p99 x{on[1] / alone[1]:.2f}  "
        f"throughput x{on[2] / alone[2]:.2f}"
    )


if __name__ == "__main__":
    main()
