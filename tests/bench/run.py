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
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import expiry
import psycopg
import webhooks
from admin_load import (
    admin_session,
    admin_while_refunds_wait,
    create_superuser,
    refund_form_round_trips,
    support_agent,
)
from databases import (
    BIG_DB,
    CHARGE_ROWS,
    CHARGES_SQL,
    MAIN_DB,
    PURGE_DB,
    SMALL_DB,
    SPREAD_CHARGES,
    drop_databases,
    fresh_database,
    load_expired,
    load_ledger,
    load_main,
    server_args,
    slow_charge_ids,
)
from gunicorn_server import ConnectionWatch, CpuShare, Gunicorn, serving_model
from http_load import Target, inline_slow_provider
from in_django import measure_in_django
from limit import LIMIT_SHAPES
from manage_commands import api_key, bulk_has_jobs, bulk_rows_per_second, timed_subprocess
from phases_common import Run, cpu_text, median_throughput, percentile, ratio, throughput
from workers import (
    Pacing,
    gather,
    http_worker,
    paced_worker,
    raw_worker,
    run_processes,
    service_worker,
    wait_ready,
)

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
        help="A smoke run (make test runs it): 1 s runs, no repeats, 20,000 rows for "
        "growth, 500 bulk rows, 1,000 slow charges, a 2 s inline window, 2 s webhook "
        "windows, 30 admin GETs, 20 single requests, 5 admin form refunds, 20,000 expired "
        "events and a 2 s window before the purge. Every phase runs; the figures are too rough "
        "to judge by.",
    )
    args = parser.parse_args()
    if unknown := set(args.only) - set(PHASES):
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.quick:
        args.seconds, args.repeats, args.big, args.bulk_rows = 1, 1, 20_000, 500
        args.inline_warm, args.inline_seconds, args.admin_gets = 0.5, 2, 30
        args.webhook_seconds = 2
        args.single_requests, args.slow_charges, args.form_refunds = 20, 1_000, 5
        args.purge_events, args.purge_baseline, args.purge_warm = 20_000, 2, 0.5
    return args


def main() -> None:
    args = parse_args()
    run = Run(args, server_args(args.url))
    with psycopg.connect(dbname="postgres", **run.server) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
        max_connections = int(conn.execute("SHOW max_connections").fetchone()[0])
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


def measure_throughput(run: Run) -> None:
    """The limit and the service, spread over 100,000 charges and on one hot charge."""
    run.section("throughput")
    n, s, r, url = run.args.clients, run.args.seconds, run.args.repeats, run.url
    for shape, hot in [("spread", False), ("hot", True)]:
        limit = median_throughput(
            f"limit: raw SQL ({run.args.limit_shape}), {shape}",
            r,
            lambda hot=hot: throughput(
                run_processes(raw_worker, n, url, hot, s, tail=(run.args.limit_shape,)), s
            ),
        )
        run.results[f"limit_{shape}"] = limit
        for dispatch in ["worker", "inline"]:
            service = median_throughput(
                f"service: create_refund, {shape}, {dispatch}",
                r,
                lambda hot=hot, dispatch=dispatch: throughput(
                    run_processes(service_worker, n, url, hot, s, tail=(dispatch,)), s
                ),
            )
            service["ratio_to_limit"] = ratio(service["per_second"], limit["per_second"])
            run.results[f"service_{shape}_{dispatch}"] = service


def measure_http_worker(run: Run) -> None:
    """`POST /v1/refunds` through gunicorn in worker mode, from --clients processes."""
    n, s = run.args.clients, run.args.seconds
    run.section(f"http, worker mode, {n} client processes")
    with (
        Gunicorn(run.url, run.workdir, dispatch="worker") as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        errors, cores = [], []
        cpu = CpuShare(web.process.pid, run.server, MAIN_DB)

        def http_run():
            cpu.start()
            gathered = run_processes(http_worker, n, web.base, run.key, s)
            cores.append(cpu.stop())  # includes the clients' start-up (in "everything else")
            errors.append(sum(g[2] for g in gathered))
            return throughput(gathered, s)

        http = median_throughput("http: POST /v1/refunds", run.args.repeats, http_run)
    http.update(db.figures(), non_200=sum(errors), stop_s=web.stop_seconds, cpu_cores=cores[-1])
    service = run.results.get("service_spread_worker", {}).get("per_second", 0)
    http["ratio_to_service"] = ratio(http["per_second"], service)
    run.results["http_spread_worker"] = http
    print(f"  last run: {cpu_text(cores[-1])}", flush=True)


def measure_webhooks(run: Run) -> None:
    """deliver_webhooks beside `POST /v1/refunds` (worker mode, --clients processes, an
    endpoint for every event, a receiver answering in --webhook-latency-ms): with
    --webhook-threads lanes, then with one. Deliveries delivered per second against
    deliveries made per second in the same window, and the seconds it takes to deliver
    the rest once the load stops (the chaos run's clients heard of refunds 112 s late)."""
    args = run.args
    n, s, lanes = args.clients, args.webhook_seconds, args.webhook_threads
    run.section(
        f"webhooks: deliver_webhooks beside POST /v1/refunds ({n} client processes, "
        f"{s:g} s), a receiver answering in {args.webhook_latency_ms} ms, {lanes} lanes and 1"
    )
    port = free_loopback_port()
    with webhooks.HookReceiver(port, args.webhook_latency_ms) as hook:
        endpoint = measure_in_django(run.url, "webhook_endpoint", hook.url)
        result: dict = {"latency_ms": args.webhook_latency_ms, "lanes": lanes}
        try:
            with Gunicorn(run.url, run.workdir, dispatch="worker") as web:
                for threads in dict.fromkeys((lanes, 1)):
                    result[f"threads_{threads}"] = delivery_run(run, web, endpoint, threads)
        finally:
            webhooks.disable_endpoint(run.url, endpoint)
    result["ratio"] = result[f"threads_{lanes}"]["delivered_to_made"]
    result["ratio_one_lane"] = result["threads_1"]["delivered_to_made"]
    run.results["webhooks_beside_refunds"] = result


def delivery_run(run: Run, web: Gunicorn, endpoint: str, threads: int) -> dict:
    """One window of HTTP refunds with `deliver_webhooks --threads {threads}` running."""
    with webhooks.Deliverer(run.url, threads, run.workdir):
        time.sleep(2)  # its start-up, before the window
        began = webhooks.database_now(run.url)
        clients, seconds = run.args.clients, run.args.webhook_seconds
        gathered = run_processes(http_worker, clients, web.base, run.key, seconds)
        ended = webhooks.database_now(run.url)
        catch_up_s, statuses = webhooks.wait_caught_up(run.url, endpoint, timeout=600)
    refunds_per_second, _ = throughput(gathered, run.args.webhook_seconds)
    counts = webhooks.window_counts(run.url, endpoint, began, ended)
    seconds = ended - began
    figures = {
        "refunds_per_second": refunds_per_second,
        "made_per_second": counts["made"] / seconds,
        "delivered_per_second": counts["delivered"] / seconds,
        "delivered_to_made": ratio(counts["delivered"], counts["made"]),
        "catch_up_seconds": catch_up_s,
        "statuses_after": statuses,
        "non_200": sum(g[2] for g in gathered),
    }
    print(
        f"  {threads} lane(s): refunds {refunds_per_second:.0f}/s made "
        f"{figures['made_per_second']:.0f} deliveries/s, "
        f"{figures['delivered_per_second']:.0f}/s delivered in the same {seconds:.1f} s "
        f"({figures['delivered_to_made']:.2f}); caught up {catch_up_s:.1f} s after the load; "
        f"deliveries then {statuses}",
        flush=True,
    )
    return figures


def free_loopback_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure_http_inline(run: Run) -> None:
    """Inline dispatch through gunicorn, every refund on a provider answering in
    --inline-latency-ms, from --inline-clients clients: against Little's law's bound."""
    args = run.args
    clients, latency = args.inline_clients, args.inline_latency_ms
    run.section(
        f"http, inline, provider answering in {latency} ms, {clients} clients "
        f"({args.inline_warm:g} s warm-up, {args.inline_seconds:g} s measured)"
    )
    with (
        Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        inline = slow_provider_load(run, web, clients)
    inline.update(db.figures(), stop_s=web.stop_seconds, latency_ms=latency)
    inline["bound_per_second"] = clients / (latency / 1000)
    inline["ratio_to_bound"] = ratio(inline["per_second"], inline["bound_per_second"])
    inline["p99_target_ms"] = 1.5 * latency
    run.results["http_inline_slow_provider"] = inline
    print(
        f"  {inline['per_second']:.1f}/s = {inline['ratio_to_bound']:.2f} of the "
        f"{inline['bound_per_second']:.0f}/s bound; p50 {inline['p50_ms']:.0f} ms, p99 "
        f"{inline['p99_ms']:.0f} ms; answers {inline['outcomes']}\n"
        f"  in flight (rate x mean latency) {inline['in_flight_littles_law']:.1f}; "
        f"{cpu_text(inline['cpu_cores'])}; CPU per refund: gunicorn "
        f"{inline['gunicorn_cpu_ms_per_refund']:.0f} ms, PostgreSQL "
        f"{inline['postgres_cpu_ms_per_refund']:.0f} ms\n"
        f"  peak connections {inline['peak_db_connections']} (server "
        f"{inline['peak_server_connections']}); gunicorn stopped in {inline['stop_s']:.1f} s",
        flush=True,
    )


def slow_provider_load(run: Run, web: Gunicorn, clients: int) -> dict:
    """`clients` clients posting refunds back to back on the slow charges, through `web`,
    for --inline-seconds after --inline-warm (http_load.inline_slow_provider's figures)."""
    return inline_slow_provider(
        Target(web.base, run.key, run.slow),
        CpuShare(web.process.pid, run.server, MAIN_DB),
        clients=clients,
        warm=run.args.inline_warm,
        seconds=run.args.inline_seconds,
    )


def measure_admin(run: Run) -> None:
    """The refunds changelist, idle and while --admin-in-flight refunds wait on a provider
    answering in --admin-latency-ms."""
    args = run.args
    in_flight, latency = args.admin_in_flight, args.admin_latency_ms
    run.section(
        f"admin refunds changelist, {args.admin_gets} GETs idle, then with {in_flight} "
        f"refunds waiting on a provider answering in {latency} ms"
    )
    username, password = create_superuser(run.url)
    with (
        Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web,
        ConnectionWatch(run.server, MAIN_DB) as db,
    ):
        admin = admin_while_refunds_wait(
            Target(web.base, run.key, run.slow),
            admin_session(web.base, username, password),
            CpuShare(web.process.pid, run.server, MAIN_DB),
            gets=args.admin_gets,
            in_flight=in_flight,
            settle=args.admin_settle,
        )
    admin.update(db.figures(), stop_s=web.stop_seconds, latency_ms=latency)
    run.results["admin_while_refunds_wait"] = admin
    print(
        f"  idle p50 {admin['idle_p50_ms']:.0f} ms, p99 {admin['idle_p99_ms']:.0f} ms; "
        f"with refunds waiting p50 {admin['loaded_p50_ms']:.0f} ms, p99 "
        f"{admin['loaded_p99_ms']:.0f} ms ({admin['p99_ratio']:.2f}x)\n"
        f"  refunds in flight during the GETs: min {admin['refunds_in_flight_min']}, mean "
        f"{admin['refunds_in_flight_mean']:.1f}; their answers {admin['posts']} (p50 "
        f"{admin['posts_p50_ms']:.0f} ms); GET failures {admin['get_failures']}; peak "
        f"connections {admin['peak_db_connections']} (server "
        f"{admin['peak_server_connections']}); gunicorn stopped in {admin['stop_s']:.1f} s\n"
        f"  while refunds waited: {cpu_text(admin['cpu_cores_with_refunds_waiting'])}",
        flush=True,
    )


def measure_single(run: Run) -> None:
    count = run.args.single_requests
    run.section(f"single requests (ms each, median of 3 x {count})")
    single = measure_in_django(run.url, "replay_and_growth", count)
    single["replay_ratio_to_create"] = ratio(single["replay_ms"], single["create_ms"])
    single["growth_ratio"] = ratio(single["10k_prior_refunds_ms"], single["no_prior_refunds_ms"])
    run.results["single"] = single
    for label, value in single.items():
        print(f"  {label:<40} {value:9.3f}", flush=True)


def measure_bulk(run: Run) -> None:
    """bulk_refund in one process and with --jobs 4, against the service's spread rate
    with --clients processes measured earlier in this run."""
    rows, url = run.args.bulk_rows, run.url
    run.section(f"bulk_refund, {rows:,} rows (worker mode)")
    service = run.results.get("service_spread_worker", {}).get("per_second", 0)
    bulk = {"rows": rows, "jobs_available": bulk_has_jobs(url)}
    # One process is the slow one: half the rows give its rate as well, in half the time.
    bulk["jobs_1_rows"] = rows // 2 if bulk["jobs_available"] else rows
    bulk["jobs_1_rows_per_second"] = bulk_rows_per_second(url, bulk["jobs_1_rows"], run.workdir)
    bulk["jobs_1_ratio_to_service"] = ratio(bulk["jobs_1_rows_per_second"], service)
    print(
        f"  one process ({bulk['jobs_1_rows']:,} rows): "
        f"{bulk['jobs_1_rows_per_second']:.0f} rows/s",
        flush=True,
    )
    if bulk["jobs_available"]:
        bulk["jobs_4_rows_per_second"] = bulk_rows_per_second(url, rows, run.workdir, 4)
        bulk["jobs_4_ratio_to_service"] = ratio(bulk["jobs_4_rows_per_second"], service)
        print(
            f"  --jobs 4: {bulk['jobs_4_rows_per_second']:.0f} rows/s = "
            f"{bulk['jobs_4_ratio_to_service']:.2f} of the service with {run.args.clients} "
            "clients",
            flush=True,
        )
    else:
        print("  --jobs 4: jobs not available (bulk_refund --help lists no --jobs)", flush=True)
    run.results["bulk_refund"] = bulk
    run.results["bulk_refund_rows_per_second"] = bulk["jobs_1_rows_per_second"]  # as before


def measure_growth(run: Run) -> None:
    big = run.args.big
    run.section(f"growth: 10,000 vs {big:,} charges (each with one refund, two entries)")
    for label, name, rows in [("small", SMALL_DB, 10_000), ("big", BIG_DB, big)]:
        size_url = fresh_database(run.server, name)
        load_ledger(size_url, rows)
        verify_s, verify_kb, output = timed_subprocess(["verify_ledger"], size_url)
        assert "the books agree" in output, output
        pages = measure_in_django(size_url, "changelist_ms")
        run.results[f"ledger_{label}"] = {
            "rows": rows,
            "verify_ledger_s": verify_s,
            "verify_ledger_peak_mb": verify_kb / 1024,
            "changelist_ms": pages,
        }
        print(
            f"  {rows:>9,} rows: verify_ledger {verify_s:6.1f} s, peak "
            f"{verify_kb / 1024:5.0f} MB; changelists (ms) "
            + ", ".join(f"{k} {v:.0f}" for k, v in pages.items()),
            flush=True,
        )
    small, large = run.results["ledger_small"], run.results["ledger_big"]
    run.results["changelist_ratio_big_to_small"] = {
        k: ratio(large["changelist_ms"][k], small["changelist_ms"][k])
        for k in small["changelist_ms"]
    }


def measure_felt(run: Run) -> None:
    """What users wait for, beside the ratios: an API refund's p99 with a provider that
    answers in --felt-latency-ms under --felt-clients clients, and the admin's refund
    form (its page, then its submit) by a support agent with a second factor, on the same
    server once the clients have stopped."""
    args = run.args
    clients, latency = args.felt_clients, args.felt_latency_ms
    run.section(
        f"what users wait for: API refunds with a {latency} ms provider and {clients} "
        f"clients, then {args.form_refunds} refunds through the admin's form"
    )
    agent = support_agent(run.url)
    with Gunicorn(run.url, run.workdir, dispatch="inline", latency_ms=latency) as web:
        api = slow_provider_load(run, web, clients)
        form = refund_form_round_trips(web.base, agent, run.slow, args.form_refunds)
    run.results["felt"] = {
        "api_latency_ms": latency,
        "api_clients": clients,
        "api_p50_ms": api["p50_ms"],
        "api_p99_ms": api["p99_ms"],
        "api_per_second": api["per_second"],
        "api_non_200": api["non_200"],
        **{f"admin_{name}": value for name, value in form.items()},
    }
    print(
        f"  API refund: p50 {api['p50_ms']:.0f} ms, p99 {api['p99_ms']:.0f} ms at "
        f"{api['per_second']:.1f}/s; answers {api['outcomes']}\n"
        f"  admin refund form: page p50 {form['form_p50_ms']:.0f} ms, p99 "
        f"{form['form_p99_ms']:.0f} ms; submit (POST and the page it leads to) p50 "
        f"{form['submit_p50_ms']:.0f} ms, p99 {form['submit_p99_ms']:.0f} ms; failures "
        f"{form['failures']}",
        flush=True,
    )


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
        deadlocks = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]
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
        deadlocks = (
            conn.execute(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()[0]
            - deadlocks
        )
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


def broken(res: dict) -> list[str]:
    """What went wrong whatever the machine's load: answers that are not 200, admin pages
    that failed, books that do not agree. The bench exits non-zero on any of them (a
    phase that raises stops it the same way); it never does on a ratio."""
    faults = []
    if not res.get("books_agree_after_run"):
        faults.append("verify_ledger did not report that the books agree")
    for name in ("http_spread_worker", "http_inline_slow_provider"):
        if res.get(name, {}).get("non_200"):
            faults.append(f"{name}: {res[name]['non_200']} answers were not 200")
    faults += _webhook_faults(res.get("webhooks_beside_refunds", {}))
    if failures := res.get("admin_while_refunds_wait", {}).get("get_failures"):
        faults.append(f"admin changelist: {failures} GETs failed")
    felt = res.get("felt", {})
    if felt.get("api_non_200") or felt.get("admin_failures"):
        faults.append(
            f"what users wait for: {felt['api_non_200']} API answers not 200, "
            f"{felt['admin_failures']} admin form refunds not made"
        )
    faults += _purge_faults(res.get("purge_under_load"))
    return faults


def _webhook_faults(hooks: dict) -> list[str]:
    faults = []
    for name, run in hooks.items():
        if not name.startswith("threads_"):
            continue
        if run["non_200"]:
            faults.append(f"webhooks phase, {name}: {run['non_200']} refunds were not 200")
        if set(run["statuses_after"]) - {"delivered"}:
            faults.append(f"webhooks phase, {name}: not all delivered: {run['statuses_after']}")
    return faults


def _purge_faults(purge: dict | None) -> list[str]:
    faults = []
    if purge and purge["purge_exit_code"] != 0:
        faults.append(
            f"purge_expired exited {purge['purge_exit_code']}: {purge['purge_output'][-500:]}"
        )
    if purge and purge["expired_left"]:
        faults.append(f"purge_expired left {purge['expired_left']} expired events and deliveries")
    return faults


def at_least(limit: float) -> tuple[str, object]:
    return f">= {limit:g}", lambda v: v >= limit


def at_most(limit: float) -> tuple[str, object]:
    return f"<= {limit:g}", lambda v: v <= limit


def below(limit: float) -> tuple[str, object]:
    return f"< {limit:g}", lambda v: v < limit


INFO = ("(info)", None)


def summary_rows(res: dict, wait_budget: float) -> list[tuple[str, float, str, str, str]]:
    """(figure, value, value as shown, target, met / MISSED / blank for information), for
    the phases this run measured, in the order docs/benchmarks.md lists them."""
    rows = [
        *_service_rows(res),
        *_http_rows(res),
        *_webhook_rows(res),
        *_inline_rows(res, wait_budget),
        *_admin_rows(res),
        *_single_rows(res),
        *_big_rows(res),
        *_felt_rows(res),
        *_purge_rows(res),
        *_bulk_rows(res),
    ]
    out = []
    for label, value, unit, (target, check) in rows:
        if unit == "n/a":
            shown, verdict = "jobs not available", ""
        else:
            whole = unit in {"count", "ms", "MB"} or unit.startswith("of")
            shown = f"{value:.0f}" if whole else f"{value:.2f}"
            if unit.startswith("of"):
                shown = f"{shown} {unit}"
            verdict = "" if check is None else ("met" if check(value) else "MISSED")
        out.append((label, value, shown, target, verdict))
    return out


# Each phase's rows for summary_rows, (figure, value, unit, (target, check)); none when the
# phase did not run.


def _service_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "service_hot_inline" in res:
        for shape, target in [("spread", at_least(0.6)), ("hot", at_least(0.8))]:
            for dispatch in ["worker", "inline"]:
                rows.append(
                    (
                        f"service / limit, {shape} ({dispatch})",
                        res[f"service_{shape}_{dispatch}"]["ratio_to_limit"],
                        "",
                        target if dispatch == "worker" else INFO,
                    )
                )
    return rows


def _http_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "http_spread_worker" in res:
        http = res["http_spread_worker"]
        if "service_spread_worker" in res:
            rows.append(("http / service (worker)", http["ratio_to_service"], "", at_least(0.5)))
        rows.append(("http p99 ms (worker)", http["p99_ms"], "ms", below(50)))
    return rows


def _webhook_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "webhooks_beside_refunds" in res:
        hooks = res["webhooks_beside_refunds"]
        lanes, one = hooks[f"threads_{hooks['lanes']}"], hooks["threads_1"]
        beside = f"webhooks delivered / made beside http refunds, {hooks['latency_ms']} ms receiver"
        rows += [
            (f"{beside}, {hooks['lanes']} lanes", hooks["ratio"], "", at_least(0.9)),
            (f"{beside}, 1 lane", hooks["ratio_one_lane"], "", INFO),
            (
                f"webhooks: s to catch up after the load, {hooks['lanes']} lanes",
                lanes["catch_up_seconds"],
                "",
                INFO,
            ),
            ("webhooks: s to catch up after the load, 1 lane", one["catch_up_seconds"], "", INFO),
        ]
    return rows


def _inline_rows(res: dict, wait_budget: float) -> list[tuple]:
    rows: list[tuple] = []
    if "http_inline_slow_provider" in res:
        inline = res["http_inline_slow_provider"]
        slow = f"http inline, {inline['latency_ms']} ms provider"
        bound = f"{inline['bound_per_second']:.0f}/s"
        rows += [
            (f"{slow}: rate / {bound} bound", inline["ratio_to_bound"], "", at_least(0.8)),
            (f"{slow}: p99 ms", inline["p99_ms"], "ms", at_most(inline["p99_target_ms"])),
            (f"{slow}: non-200 answers", inline["non_200"], "count", at_most(0)),
            (
                f"{slow}: answered pending (> {wait_budget:g} s)",
                inline["outcomes"].get("pending", 0),
                f"of {sum(inline['outcomes'].values())}",
                INFO,
            ),
        ]
    return rows


def _admin_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "admin_while_refunds_wait" in res:
        admin = res["admin_while_refunds_wait"]
        rows += [
            (
                f"admin changelist p99, {admin['in_flight']} refunds waiting / idle",
                admin["p99_ratio"],
                "",
                at_most(2),
            ),
            (
                "admin: waiting refunds answered pending",
                admin["posts"].get("pending", 0),
                f"of {sum(admin['posts'].values())}",
                INFO,
            ),
        ]
    return rows


def _single_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "single" in res:
        rows += [
            ("replay / create", res["single"]["replay_ratio_to_create"], "", at_most(0.5)),
            ("10k prior refunds / none", res["single"]["growth_ratio"], "", at_most(1.2)),
        ]
    return rows


def _big_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "ledger_big" in res:
        rows += [
            (f"changelist {k} big / small", v, "", at_most(2))
            for k, v in res["changelist_ratio_big_to_small"].items()
        ]
        big = res["ledger_big"]
        rows += [
            ("verify_ledger big, s", big["verify_ledger_s"], "s", below(60)),
            ("verify_ledger big, peak MB", big["verify_ledger_peak_mb"], "MB", below(500)),
        ]
    return rows


def _felt_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "felt" in res:
        felt = res["felt"]
        rows += [
            (
                f"API refund p99 ms, {felt['api_latency_ms']} ms provider, "
                f"{felt['api_clients']} clients",
                felt["api_p99_ms"],
                "ms",
                INFO,
            ),
            ("admin refund form: page p99 ms", felt["admin_form_p99_ms"], "ms", INFO),
            ("admin refund form: submit p99 ms", felt["admin_submit_p99_ms"], "ms", INFO),
        ]
    return rows


def _purge_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "purge_under_load" in res:
        purge = res["purge_under_load"]
        rows += [
            ("refund p99 during purge_expired / without", purge["p99_ratio"], "", at_most(1.5)),
            ("purge_expired rows/s under refund load", purge["rows_per_second"], "count", INFO),
            (
                "purge: longest lock wait ms (sampled 0.1 s)",
                purge["during"]["longest_lock_wait_ms"],
                "ms",
                INFO,
            ),
            (
                "purge: its longest transaction ms (sampled 0.1 s)",
                purge["during"]["purge_longest_transaction_ms"],
                "ms",
                INFO,
            ),
        ]
    return rows


def _bulk_rows(res: dict) -> list[tuple]:
    rows: list[tuple] = []
    if "bulk_refund" in res and "service_spread_worker" in res:
        bulk = res["bulk_refund"]
        rows.append(
            ("bulk_refund (one process) / service", bulk["jobs_1_ratio_to_service"], "", INFO)
        )
        if bulk["jobs_available"]:
            jobs_4 = bulk["jobs_4_ratio_to_service"]
            rows.append(("bulk_refund --jobs 4 / service", jobs_4, "", at_least(0.6)))
        else:
            rows.append(("bulk_refund --jobs 4 / service", float("nan"), "n/a", (">= 0.6", None)))
    return rows


def print_summary(rows: list[dict], markdown: bool = False) -> None:
    print("summary")
    for row in rows:
        print(
            f"  {row['figure']:<52} {row['shown']:>18}   target {row['target']:<8} {row['verdict']}"
        )
    if markdown:
        print("\n| figure | value | target | |\n|---|---:|---|---|")
        for row in rows:
            print(f"| {row['figure']} | {row['shown']} | {row['target']} | {row['verdict']} |")


if __name__ == "__main__":
    main()
