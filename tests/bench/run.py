"""`make bench`: the refund path against PostgreSQL's own limit, and what users feel through
the serving model, every figure from one run (ratios to baselines measured in that run).

    python tests/bench/run.py [--quick] [--markdown] [--url postgres://root@127.0.0.1:5432/postgres]
                              [--clients 4] [--seconds 4] [--repeats 3] [--big 1000000] ...

Creates its own databases (bench_refunds, bench_small, bench_big, bench_purge) on the
server, loads them with SQL, measures, prints a summary (each figure with its target, met
or MISSED) and writes bench-results.json. Throughputs are medians of --repeats runs of --seconds
each, from --clients processes. The HTTP figures start gunicorn as `make run` does
(gunicorn.conf.py: gthread processes x threads): worker mode; inline with a provider
answering in 500 ms under 32 clients (Little's law: 32 / 0.5 s = 64/s at best); and the
admin's refunds changelist while 16 refunds wait on a provider answering in 5 s. The
webhooks phase runs deliver_webhooks beside the HTTP refund load, with its lanes and with
one, against a receiver answering in 20 ms: deliveries made and delivered per second, and
how long it takes to catch up once the load stops. The purge phase times refunds while
purge_expired removes a million expired events.
docs/benchmarks.md explains each figure and what limits it.

This file reads the options and runs the phases in order. The phases are in
phases_service.py, phases_http.py and phases_purge.py; the processes they start in
workers.py and in_django.py; the databases and their loading in databases.py; the limit's
raw SQL in limit.py; the server and the HTTP load in gunicorn_server.py, http_load.py and
admin_load.py; the summary and its targets in summary.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import psycopg
from databases import (
    MAIN_DB,
    drop_databases,
    fresh_database,
    load_main,
    server_args,
    slow_charge_ids,
)
from gunicorn_server import serving_model
from limit import LIMIT_SHAPES
from manage_commands import api_key, timed_subprocess
from phases_common import Run
from phases_http import (
    measure_admin,
    measure_felt,
    measure_http_inline,
    measure_http_worker,
    measure_webhooks,
)
from phases_purge import measure_purge
from phases_service import measure_bulk, measure_growth, measure_single, measure_throughput
from summary import broken, print_summary, summary_rows

ROOT = Path(__file__).resolve().parents[2]
# The serving model's settings: recorded with the results when the environment sets them.
SERVING_ENV = (
    "WEB_CONCURRENCY",
    "GUNICORN_THREADS",
    "GUNICORN_CMD_ARGS",
    "REFUND_INLINE_WAIT_SECONDS",
    "REFUND_SEND_THREADS",
    "DATABASE_POOL_MAX_SIZE",
    "DATABASE_CONN_MAX_AGE",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--bulk-rows", type=int, default=10_000)
    parser.add_argument(
        "--limit-shape",
        choices=LIMIT_SHAPES,
        default="statements",
        help="The limit's SQL: one round trip per statement (default), or batched as the "
        "service writes since its reserve went to one round trip.",
    )
    parser.add_argument(
        "--webhook-seconds",
        type=float,
        default=10,
        help="Seconds of HTTP refunds in the webhooks phase, for each deliver_webhooks run.",
    )
    parser.add_argument(
        "--webhook-latency-ms",
        type=int,
        default=20,
        help="How long the webhooks phase's receiver takes to answer each delivery.",
    )
    parser.add_argument(
        "--webhook-threads",
        type=int,
        default=int(os.environ.get("WEBHOOK_DELIVERY_THREADS", "8")),
        help="deliver_webhooks --threads in the webhooks phase (default WEBHOOK_DELIVERY_THREADS "
        "or its default, 8); it runs with 1 as well, for comparison.",
    )
    parser.add_argument("--single-requests", type=int, default=200)
    parser.add_argument("--slow-charges", type=int, default=10_000)
    parser.add_argument("--inline-clients", type=int, default=32)
    parser.add_argument("--inline-latency-ms", type=int, default=500)
    parser.add_argument("--inline-warm", type=float, default=2)
    parser.add_argument("--inline-seconds", type=float, default=10)
    parser.add_argument("--felt-clients", type=int, default=16)
    parser.add_argument("--felt-latency-ms", type=int, default=200)
    parser.add_argument("--form-refunds", type=int, default=40)
    parser.add_argument("--admin-gets", type=int, default=200)
    parser.add_argument("--admin-in-flight", type=int, default=16)
    parser.add_argument("--admin-latency-ms", type=int, default=5000)
    parser.add_argument("--admin-settle", type=float, default=2.5)
    parser.add_argument(
        "--purge-events",
        type=int,
        default=1_000_000,
        help="Expired events (each with one delivery) purge_expired removes in the purge phase.",
    )
    parser.add_argument(
        "--purge-rate",
        type=float,
        default=50,
        help="Refunds a second during the purge phase, from --purge-clients processes; 0: "
        "back to back.",
    )
    parser.add_argument("--purge-clients", type=int, default=2)
    parser.add_argument(
        "--purge-args",
        type=str.split,
        default=[],
        help='More arguments for purge_expired in the purge phase, e.g. "--batch-size 200".',
    )
    parser.add_argument(
        "--purge-baseline", type=float, default=30, help="Seconds of refunds before the purge."
    )
    parser.add_argument(
        "--purge-warm",
        type=float,
        default=10,
        help="Seconds of refunds before the baseline, not measured.",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results.json")
    parser.add_argument(
        "--markdown", action="store_true", help="Also print the summary as a Markdown table."
    )
    parser.add_argument(
        "--keep-files",
        type=Path,
        help="Keep gunicorn's logs (gunicorn-PORT.log) and the bulk files in this directory.",
    )
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=[],
        help="Run only these phases (comma-separated: throughput, http_worker, webhooks, "
        "http_inline, admin, single, bulk, growth, felt, purge); figures needing a phase "
        "left out are left out.",
    )
    parser.add_argument(
        "--drop-databases",
        action="store_true",
        help="Drop the bench's databases when it ends (make test does); they are kept "
        "otherwise, to look into.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A smoke run (make test runs it): 1 s runs, no repeats, 5,000 rows for "
        "growth, 500 bulk rows, 1,000 slow charges, a 2 s inline window, 1 s webhook "
        "windows, 30 admin GETs, 20 single requests, 5 admin form refunds, 5,000 expired "
        "events and a 2 s window before the purge. Every phase runs; the figures are too rough "
        "to judge by.",
    )
    args = parser.parse_args()
    if unknown := set(args.only) - set(PHASES):
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.quick:
        args.seconds, args.repeats, args.big, args.bulk_rows = 1, 1, 5_000, 500
        args.inline_warm, args.inline_seconds, args.admin_gets = 0.5, 2, 30
        args.webhook_seconds = 1
        args.single_requests, args.slow_charges, args.form_refunds = 20, 1_000, 5
        args.purge_events, args.purge_baseline, args.purge_warm = 5_000, 2, 0.5
    return args


def main() -> None:
    args = parse_args()
    run = Run(args, server_args(args.url))
    with psycopg.connect(dbname="postgres", **run.server) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        limit = conn.execute("SHOW max_connections").fetchone()
        assert version is not None and limit is not None
        pg_version, max_connections = version[0], int(limit[0])
    model = serving_model()
    run.results.update(
        machine={
            "cores": os.cpu_count(),
            "postgresql": pg_version,
            "max_connections": max_connections,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "gunicorn": f"{model['workers']} processes x {model['threads']} threads (gthread)",
            "load_average_at_start": os.getloadavg(),
            "inline_wait_seconds": os.environ.get("REFUND_INLINE_WAIT_SECONDS", "2"),
            # Whatever of the serving model's settings this environment overrides.
            "serving_env": {k: os.environ[k] for k in SERVING_ENV if k in os.environ},
        },
        settings={k: str(v) for k, v in vars(args).items()},
    )
    print(
        f"machine: {os.cpu_count()} cores, PostgreSQL {pg_version} (max_connections "
        f"{max_connections}); {args.clients} client processes, medians of {args.repeats} "
        f"runs of {args.seconds:g} s; gunicorn.conf.py: {model['workers']} processes x "
        f"{model['threads']} threads",
        flush=True,
    )
    try:
        run.url = fresh_database(run.server, MAIN_DB)
        load_main(run.url, args.slow_charges)
        run.slow = slow_charge_ids(args.slow_charges)
        run.key = api_key(run.url)
        with tempfile.TemporaryDirectory() as workdir:
            run.workdir = args.keep_files or Path(workdir)
            run.workdir.mkdir(parents=True, exist_ok=True)
            for name, phase in PHASES.items():
                if not args.only or name in args.only:
                    phase(run)
        run.section("the books after every phase")
        # Statistics first: the loader's ANALYZE saw the 10,000 refunds of one charge only,
        # and with those the planner sums each charge's refunds by scanning them all (541 s
        # measured once, 4 s after ANALYZE); autovacuum keeps a real database's up to date.
        with psycopg.connect(run.url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        verify_s, _, output = timed_subprocess(["verify_ledger"], run.url)
        run.results["books_agree_after_run"] = "the books agree" in output
        said = output.split("peak_rss_kb")[0].strip()[-200:]
        print(f"  verify_ledger on {MAIN_DB}: {said} ({verify_s:.1f} s)", flush=True)
    finally:
        if args.drop_databases:
            drop_databases(run.server)
    results = run.results
    results["seconds"] = time.perf_counter() - run.started
    results["machine"]["load_average_at_end"] = os.getloadavg()
    wait_budget = float(results["machine"]["inline_wait_seconds"])
    results["summary"] = [
        {"figure": label, "value": value, "shown": shown, "target": target, "verdict": verdict}
        for label, value, shown, target, verdict in summary_rows(results, wait_budget)
    ]
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_summary(results["summary"], markdown=args.markdown)
    if faults := broken(results):
        # A ratio is judged on a quiet machine; these are wrong on any machine.
        print("the run is broken:\n  " + "\n  ".join(faults), flush=True)
        raise SystemExit(1)
    loads = results["machine"]["load_average_at_start"], results["machine"]["load_average_at_end"]
    print(
        f"wrote {args.out} in {results['seconds']:.0f} s; load average (1, 5, 15 min) at start "
        + ", ".join(f"{x:.1f}" for x in loads[0])
        + "; at end "
        + ", ".join(f"{x:.1f}" for x in loads[1]),
        flush=True,
    )


PHASES = {
    "throughput": measure_throughput,
    "http_worker": measure_http_worker,
    "webhooks": measure_webhooks,
    "http_inline": measure_http_inline,
    "admin": measure_admin,
    "single": measure_single,
    "bulk": measure_bulk,
    "growth": measure_growth,
    "felt": measure_felt,
    "purge": measure_purge,
}


if __name__ == "__main__":
    main()
