"""The bench's purge phase: refund latency while purge_expired removes a million expired
events and their deliveries, in a database of its own, against the same load without it."""

from __future__ import annotations

import collections
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import expiry
import psycopg
from databases import (
    CHARGE_ROWS,
    CHARGES_SQL,
    PURGE_DB,
    SPREAD_CHARGES,
    fresh_database,
    load_expired,
)
from in_django import measure_in_django
from phases_common import Run, percentile, ratio
from workers import (
    Pacing,
    gather,
    paced_worker,
    wait_ready,
)

ROOT = Path(__file__).resolve().parents[2]


PURGE_APPLICATION = "bench_purge_expired"  # the purge's backend in pg_stat_activity


def measure_purge(run: Run) -> None:
    """Refund p99 while `manage.py purge_expired` removes --purge-events expired events and
    their deliveries, against the same load without it: --purge-clients processes of
    create_refund (inline) at --purge-rate a second, --purge-warm s not measured, then
    --purge-baseline s without the purge, then for as long as the purge runs, in its own
    process; pg_stat_activity and pg_locks sampled every 0.1 s throughout (LockWatch).

    In a database of its own (100,000 charges, as the main one has), with inline refunds,
    as production runs them: the earlier phases leave every worker-mode refund pending in
    the main one, and the events' rule reads the refunds that are not final in each batch
    (a first try there, with about 700 pending, took 625 ms a batch)."""
    args = run.args
    events, rate, clients = args.purge_events, args.purge_rate, args.purge_clients
    days = int(os.environ.get("EVENT_RETENTION_DAYS", "30"))
    pace = f"{rate:g}/s" if rate else "back to back"
    run.section(
        f"purge_expired under refund load: {events:,} expired events each with a delivery; "
        f"create_refund from {clients} processes at {pace}"
    )
    url = fresh_database(run.server, PURGE_DB)
    endpoint = measure_in_django(url, "webhook_endpoint")
    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CHARGES_SQL, {**CHARGE_ROWS, "rows": SPREAD_CHARGES})
    # One batch more than measured: the plans below take the first through the service.
    load_expired(url, events + 1000, endpoint, days)
    loaded_s = time.perf_counter() - began
    plans = measure_in_django(url, "purge_batch_plans")
    print(f"  loaded in {loaded_s:.0f} s; one batch of events through purge_expired:")
    grouped: dict[str, list[float]] = collections.defaultdict(list)
    for plan in plans:
        grouped[plan_line(plan)].append(plan["ms"])
    for statement, times in grouped.items():
        print(f"    {len(times)} x {statement} ({sum(times):.0f} ms in all)", flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        # The load's refunds write their events but no deliveries: nothing here delivers
        # them, and a pile of pending ones (125 more a second) is not a steady state. It
        # is a case of its own: the events' rule probes pending deliveries, planned from
        # statistics that saw none, so each batch reads the whole pile (200,000 events
        # took 412 s at 50 refunds a second, 64,000 pending by the end, a batch up to 10 s).
        conn.execute("UPDATE ledger_app_webhookendpoint SET status = 'disabled'")
        before = expired_rows(conn, days)
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        deadlocks = row[0]
    ctx = multiprocessing.get_context("spawn")
    ready, results, go, stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    interval = 1 / rate * clients if rate else 0
    procs = [
        ctx.Process(
            target=paced_worker,
            args=(url, rate / clients, n * interval / clients, Pacing(ready, go, stop, results)),
        )
        for n in range(clients)
    ]
    with expiry.LockWatch(run.server, PURGE_DB, PURGE_APPLICATION) as watch:
        for proc in procs:
            proc.start()
        wait_ready(ready, procs)
        go.set()
        # Not measured: the first refunds read back what loading the million pushed out of
        # shared buffers (a run without this had a baseline p99 of 108 ms, 13 to 17 ms
        # once warm).
        time.sleep(args.purge_warm)
        start = time.monotonic()
        time.sleep(args.purge_baseline)
        purge_start = time.monotonic()
        purge = subprocess.run(
            [sys.executable, "manage.py", "purge_expired", *args.purge_args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "DATABASE_URL": url, "PGAPPNAME": PURGE_APPLICATION},
            timeout=3600,
        )
        purge_end = time.monotonic()
        stop.set()
        gathered = gather(results, procs, "paced_worker")
    samples = [sample for worker in gathered for sample in worker]
    without = [s for due, s in samples if start <= due < purge_start]
    during = [s for due, s in samples if purge_start <= due < purge_end]
    with psycopg.connect(url, autocommit=True) as conn:
        after = expired_rows(conn, days)
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        deadlocks = row[0] - deadlocks
    purge_s = purge_end - purge_start
    removed = before["total"] - after["total"]
    result = {
        "events": before["events"],
        "deliveries": before["deliveries"],
        "rate_per_second": rate,
        "clients": clients,
        "load_seconds": loaded_s,
        "baseline_seconds": purge_start - start,
        "purge_seconds": purge_s,
        "purge_exit_code": purge.returncode,
        "purge_output": (purge.stdout + purge.stderr)[-2000:],
        "rows_removed": removed,
        "rows_per_second": removed / purge_s if purge_s else 0,
        "expired_left": after["total"],
        "refunds_without": len(without),
        "refunds_during": len(during),
        "p50_without_ms": percentile(without, 0.50),
        "p99_without_ms": percentile(without, 0.99),
        "p50_during_ms": percentile(during, 0.50),
        "p99_during_ms": percentile(during, 0.99),
        "max_during_ms": max(during, default=0) * 1000,
        "without": watch.window(start, purge_start),
        "during": watch.window(purge_start, purge_end),
        "deadlocks": deadlocks,
        "plans": plans,
    }
    result["p99_ratio"] = ratio(result["p99_during_ms"], result["p99_without_ms"])
    run.results["purge_under_load"] = result
    said = " / ".join(line.split(": ", 1)[-1] for line in purge.stdout.splitlines()[:1])
    during_watch, without_watch = result["during"], result["without"]
    print(
        f"  purge_expired exited {purge.returncode} after {purge_s:.1f} s (start-up included): "
        f"{removed:,} rows removed, {result['rows_per_second']:,.0f} rows/s; {said}\n"
        f"  refunds without: {len(without)}, p50 {result['p50_without_ms']:.1f} ms, p99 "
        f"{result['p99_without_ms']:.1f} ms; during: {len(during)}, p50 "
        f"{result['p50_during_ms']:.1f} ms, p99 {result['p99_during_ms']:.1f} ms "
        f"({result['p99_ratio']:.2f}x), max {result['max_during_ms']:.0f} ms\n"
        f"  sampled every 0.1 s ({during_watch['samples']} samples during): purge's longest "
        f"transaction {during_watch['purge_longest_transaction_ms']:.0f} ms; longest lock "
        f"wait {during_watch['longest_lock_wait_ms']:.0f} ms during, "
        f"{without_watch['longest_lock_wait_ms']:.0f} ms without; deadlocks {deadlocks}; "
        f"expired rows left {after['total']}\n"
        f"  other backends at work, by wait event: {during_watch['others_at_work']} during, "
        f"{without_watch['others_at_work']} without; checkpoints begun "
        f"{during_watch['checkpoints']} during, {without_watch['checkpoints']} without",
        flush=True,
    )


def plan_line(plan: dict) -> str:
    """A statement of a batch in a line: what it does, and how it reads each table."""
    what = re.match(r'(SELECT|DELETE)\b.*?FROM "(\w+)"', plan["sql"])
    head = f"{what[1]} {what[2]}" if what else plan["sql"][:40]
    scans = re.findall(
        r"(Seq Scan on \w+|Index (?:Only )?Scan using \w+ on \w+|Bitmap Heap Scan on \w+)",
        plan["plan"],
    )
    return f"{head}: {', '.join(dict.fromkeys(scans))}"


def expired_rows(conn, days: int) -> dict:
    """Events past the retention and their deliveries, as this moment counts them."""
    events, deliveries = conn.execute(
        "WITH old AS (SELECT id FROM ledger_app_event "
        "WHERE created_at < now() - make_interval(days => %(days)s)) "
        "SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM ledger_app_webhookdelivery "
        "WHERE event_id IN (SELECT id FROM old))",
        {"days": days},
    ).fetchone()
    return {"events": events, "deliveries": deliveries, "total": events + deliveries}
