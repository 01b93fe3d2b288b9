"""`make bench-ha`: what RPO 0 costs, on the local failover cluster (scripts/ha-cluster,
started and stopped here). The same refunds (create_refund, inline, the simulated provider
answering at once, spread charges) from --clients processes, in alternating rounds:
each commit waiting for the synchronous standby (the cluster's synchronous_commit on), and
committed on the primary alone (synchronous_commit local, set on the role they connect as).
Prints p50 and p99 per refund and refunds a second for each, the ratios, and what one
commit alone takes each way (one row inserted, straight through psycopg).

    python tests/bench/ha_latency.py [--clients 2] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from databases import MAIN_DB, fresh_database, load_main
from workers import run_processes, service_worker

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ha-cluster"
VARIANTS = {"synchronous standby": "on", "primary alone": "local"}


def commit_latencies(url: str, seconds: float) -> list[float]:
    """One row inserted and committed at a time, straight through psycopg: what a commit
    alone costs with the role's synchronous_commit."""
    latencies = []
    with psycopg.connect(url, autocommit=True) as conn:
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
    try:
        subprocess.run([sys.executable, str(SCRIPT), "up", "--dir", str(directory)], check=True)
        state = json.loads((directory / "cluster.json").read_text())
        # Straight to the primary through HAProxy, as make bench connects to its server.
        server = {"host": "127.0.0.1", "port": state["primary_port"], "user": "postgres"}
        url = fresh_database(server, MAIN_DB)
        load_main(url, 0)
        # A role per variant, its synchronous_commit set on the role, as an operator would
        # for a client that may lose its last commits: the workers' code is make bench's.
        urls = {}
        with psycopg.connect(url, autocommit=True) as conn:
            for name, mode in VARIANTS.items():
                role = f"bench_commit_{mode}"
                conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
                conn.execute(f"ALTER ROLE {role} SET synchronous_commit = {mode}")
                urls[name] = url.replace("postgres@", f"{role}@", 1)
        seen: dict[str, list[float]] = {name: [] for name in VARIANTS}
        commits: dict[str, list[float]] = {name: [] for name in VARIANTS}
        counts: dict[str, int] = dict.fromkeys(VARIANTS, 0)
        for _ in range(args.rounds):
            for name in VARIANTS:
                commits[name].extend(commit_latencies(urls[name], args.seconds / 2))
                for count, latencies in run_processes(
                    service_worker, args.clients, urls[name], False, args.seconds, tail=("inline",)
                ):
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
