"""`make bench`: the refund path against PostgreSQL's own limit, every figure from one run.

    python tests/bench/run.py [--quick] [--url postgres://root@127.0.0.1:5432/postgres]
                              [--clients 4] [--seconds 4] [--repeats 3] [--big 1000000]

Creates its own databases (bench_refunds, bench_small, bench_big) on the server, loads
them with SQL, measures, prints one table and writes bench-results.json. Throughputs are
medians of --repeats runs of --seconds each, from --clients processes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import dj_database_url
import psycopg

ROOT = Path(__file__).resolve().parents[2]
MAIN_DB, SMALL_DB, BIG_DB = "bench_refunds", "bench_small", "bench_big"
SPREAD_CHARGES = 100_000
HOT = "ch_benchHotCharge0000000001"
GROWN = "ch_benchGrownCharge00000001"


# --- databases -----------------------------------------------------------------------


def server_args(url: str) -> dict:
    cfg = dj_database_url.parse(url)
    return {"host": cfg["HOST"], "port": cfg["PORT"], "user": cfg["USER"]}


def db_url(server: dict, name: str) -> str:
    return f"postgres://{server['user']}@{server['host']}:{server['port']}/{name}"


def fresh_database(server: dict, name: str) -> str:
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = db_url(server, name)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
    )
    return url


CHARGES_SQL = """
INSERT INTO ledger_app_charge (id, amount, amount_refunded, currency, status, description,
    customer, metadata, provider_idempotency_key, provider_charge_id, status_detail,
    created_at, updated_at)
SELECT %(prefix)s || lpad(i::text, 20, '0'), %(amount)s, %(refunded)s, 'usd', 'succeeded',
       'Order ' || i, 'cus_' || (i %% 1000), '{}'::jsonb, NULL, '', '',
       now() - make_interval(secs => i), now()
FROM generate_series(1, %(rows)s) AS i
"""
REFUNDS_SQL = """
INSERT INTO ledger_app_refund (id, charge_id, amount, currency, status, reason, metadata, note,
    source, actor, provider_idempotency_key, provider_refund_id, status_detail,
    dispatch_attempts, leased_until, created_at, updated_at)
SELECT 're_' || %(prefix)s || lpad(i::text, 20, '0'), %(charge)s, %(amount)s, 'usd',
       'succeeded', '', '{}'::jsonb, '', 'api', 'bench',
       'refund:re_' || %(prefix)s || lpad(i::text, 20, '0'), '', '', 1, NULL,
       now() - make_interval(secs => i), now()
FROM generate_series(1, %(rows)s) AS i
"""
ENTRIES_SQL = """
INSERT INTO ledger_app_ledgerentry (charge_id, refund_id, kind, amount, refunded_delta,
    currency, actor, memo, created_at)
SELECT charge_id, id, kind, amount, CASE kind WHEN 'refund_reserved' THEN amount ELSE 0 END,
       'usd', 'bench', '', created_at
FROM ledger_app_refund, (VALUES ('refund_reserved'), ('refund_succeeded')) AS k(kind)
"""


def load_main(url: str) -> None:
    """100,000 charges for spread load, a hot charge, and a charge with 10,000 refunds."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            CHARGES_SQL, {"prefix": "ch_", "amount": 10**15, "refunded": 0, "rows": SPREAD_CHARGES}
        )
        for charge, refunded in [(HOT, 0), (GROWN, 10_000)]:
            conn.execute(
                "INSERT INTO ledger_app_charge (id, amount, amount_refunded, currency, status, "
                "description, customer, metadata, provider_charge_id, status_detail, "
                "created_at, updated_at) VALUES (%s, %s, %s, 'usd', 'succeeded', '', '', "
                "'{}', '', '', now(), now())",
                [charge, 10**15, refunded],
            )
        conn.execute(REFUNDS_SQL, {"prefix": "g", "charge": GROWN, "amount": 1, "rows": 10_000})
        conn.execute(ENTRIES_SQL)
        conn.execute("ANALYZE")


def load_ledger(url: str, rows: int) -> None:
    """`rows` charges, each with one succeeded refund and its two ledger entries."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            CHARGES_SQL, {"prefix": "ch_", "amount": 10_000, "refunded": 500, "rows": rows}
        )
        conn.execute(
            REFUNDS_SQL.replace("%(charge)s", "'ch_' || lpad(i::text, 20, '0')"),
            {"prefix": "b", "amount": 500, "rows": rows},
        )
        conn.execute(ENTRIES_SQL)
        conn.execute("ANALYZE")


# --- workers (each in its own process) -------------------------------------------------


def charge_for(hot: bool, rng) -> str:
    return HOT if hot else f"ch_{rng.randint(1, SPREAD_CHARGES):020d}"


def raw_worker(url, hot, seconds, barrier, results):
    """The refund's exact SQL shape, straight through psycopg: PostgreSQL's own limit."""
    import random

    rng = random.Random()
    conn = psycopg.connect(url)
    barrier.wait()
    done, latencies, deadline = 0, [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        charge, refund = charge_for(hot, rng), "re_" + uuid.uuid4().hex[:24]
        with conn.transaction():
            conn.execute(
                "SELECT amount, amount_refunded, status, currency FROM "
                "ledger_app_charge WHERE id = %s FOR UPDATE",
                [charge],
            )
            conn.execute(
                "INSERT INTO ledger_app_idempotencyrecord (key, operation, fingerprint, "
                "request_params, refund_id, created_at) VALUES (%s, 'refund.create', %s, "
                "%s, %s, now())",
                [uuid.uuid4().hex, "f" * 64, json.dumps({"charge": charge, "amount": 1}), refund],
            )
            conn.execute(
                "INSERT INTO ledger_app_refund (id, charge_id, amount, currency, status, "
                "reason, metadata, note, source, actor, provider_idempotency_key, "
                "provider_refund_id, status_detail, dispatch_attempts, created_at, "
                "updated_at) VALUES (%s, %s, 1, 'usd', 'pending', '', '{}', '', 'api', '', "
                "%s, '', '', 0, now(), now())",
                [refund, charge, f"refund:{refund}"],
            )
            conn.execute(
                "UPDATE ledger_app_charge SET amount_refunded = amount_refunded + 1, "
                "updated_at = now() WHERE id = %s",
                [charge],
            )
            conn.execute(
                "INSERT INTO ledger_app_ledgerentry (charge_id, refund_id, kind, amount, "
                "refunded_delta, currency, actor, memo, created_at) VALUES (%s, %s, "
                "'refund_reserved', 1, 1, 'usd', '', '', now())",
                [charge, refund],
            )
        latencies.append(time.perf_counter() - began)
        done += 1
    conn.close()
    results.put((done, latencies))


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


def service_worker(url, hot, seconds, barrier, results, dispatch):
    import random

    django_setup(url, dispatch)
    from ledger_app.services.refunds import create_refund

    rng = random.Random()
    create_refund(charge_id=charge_for(hot, rng), amount=1, source="api")  # warm up
    barrier.wait()
    done, latencies, deadline = 0, [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        create_refund(
            charge_id=charge_for(hot, rng), amount=1, idempotency_key=uuid.uuid4().hex, source="api"
        )
        latencies.append(time.perf_counter() - began)
        done += 1
    results.put((done, latencies))


def http_worker(base, key, seconds, barrier, results):
    import random

    import requests

    rng = random.Random()
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    for _ in range(10):  # warm every worker's imports and connections before measuring
        session.post(
            f"{base}/v1/refunds", data={"charge": charge_for(False, rng), "amount": "1"}, timeout=30
        )
    barrier.wait()
    done, latencies, errors, deadline = 0, [], 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        response = session.post(
            f"{base}/v1/refunds",
            data={"charge": charge_for(False, rng), "amount": "1"},
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=30,
        )
        latencies.append(time.perf_counter() - began)
        if response.status_code != 200:
            errors += 1
        done += 1
    results.put((done, latencies, errors))


def run_processes(target, count, *args, tail=()):
    """Start `count` processes of target(*args, barrier, results, *tail); gather results."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(count), ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(*args, barrier, results, *tail)) for _ in range(count)
    ]
    for proc in procs:
        proc.start()
    gathered = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    return gathered


def throughput(gathered, seconds) -> tuple[float, list[float]]:
    total = sum(g[0] for g in gathered)
    latencies = [lat for g in gathered for lat in g[1]]
    return total / seconds, latencies


def percentile(values, fraction) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000 if ordered else 0


# --- measurements ----------------------------------------------------------------------


def median_throughput(label, runs, make) -> dict:
    rates, latencies = [], []
    for _ in range(runs):
        rate, lats = make()
        rates.append(rate)
        latencies += lats
    result = {
        "per_second": statistics.median(rates),
        "runs": rates,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
    }
    print(
        f"  {label:<40} {result['per_second']:>9.0f}/s  p50 {result['p50_ms']:6.1f} ms  "
        f"p99 {result['p99_ms']:6.1f} ms",
        flush=True,
    )
    return result


def start_gunicorn(url: str, workers: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REFUND_DISPATCH": "worker",
        "API_RATE_LIMIT": "1000000/second",
        "LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "backoffice.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return server, base
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("gunicorn did not start")


def timed_subprocess(args, url) -> tuple[float, int, str]:
    """Seconds and peak RSS (KB) of a manage.py command."""
    began = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": url},
    )
    elapsed = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before), done.stdout + done.stderr


def measure_in_django(url, func_name, *args):
    """Run one of the functions below in a fresh process with Django on `url`."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_in_django, args=(url, func_name, args, results))
    proc.start()
    value = results.get(timeout=900)
    proc.join(60)
    return value


def _in_django(url, func_name, args, results):
    django_setup(url, "worker")
    results.put(globals()[func_name](*args))


def replay_and_growth(count: int) -> dict:
    from ledger_app.services.refunds import create_refund

    def per_op(charge, keyed_replay=False):
        key = uuid.uuid4().hex
        create_refund(charge_id=charge, amount=1, idempotency_key=key, source="api")
        began = time.perf_counter()
        for _ in range(count):
            if keyed_replay:
                create_refund(charge_id=charge, amount=1, idempotency_key=key, source="api")
            else:
                create_refund(
                    charge_id=charge, amount=1, idempotency_key=uuid.uuid4().hex, source="api"
                )
        return (time.perf_counter() - began) / count * 1000

    fresh = "ch_" + f"{SPREAD_CHARGES:020d}"
    create_ms = statistics.median(per_op(fresh) for _ in range(3))
    replay_ms = statistics.median(per_op(fresh, keyed_replay=True) for _ in range(3))
    none_ms = statistics.median(per_op(HOT) for _ in range(3))
    grown_ms = statistics.median(per_op(GROWN) for _ in range(3))
    return {
        "create_ms": create_ms,
        "replay_ms": replay_ms,
        "no_prior_refunds_ms": none_ms,
        "10k_prior_refunds_ms": grown_ms,
    }


def changelist_ms() -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    pages = {
        "charges": ("/admin/ledger_app/charge/", {}),
        "charges_filtered": ("/admin/ledger_app/charge/", {"refunded": "partial"}),
        "charges_by_id": ("/admin/ledger_app/charge/", {"q": "ch_" + f"{7:020d}"}),
        "refunds": ("/admin/ledger_app/refund/", {}),
    }
    timings = {}
    for label, (path, params) in pages.items():
        client.get(path, params)
        runs = []
        for _ in range(5):
            began = time.perf_counter()
            assert client.get(path, params).status_code == 200
            runs.append((time.perf_counter() - began) * 1000)
        timings[label] = statistics.median(runs)
    return timings


def bulk_rows_per_second(url: str, rows: int, workdir: Path) -> float:
    path = workdir / "bench-bulk.csv"
    with path.open("w") as handle:
        handle.write("charge,amount,reason,note\n")
        for n in range(rows):
            handle.write(f"ch_{1 + n % SPREAD_CHARGES:020d},1,duplicate,\n")
    env = {**os.environ, "DATABASE_URL": url, "REFUND_DISPATCH": "worker"}
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "bulk_refund", str(path), "--batch-id", uuid.uuid4().hex],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return rows / (time.perf_counter() - began)


def ratio(value: float, base: float) -> float:
    return value / base if base else 0.0


def main() -> None:
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
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results.json")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A smoke run in under 2 minutes: 1 s runs, no "
        "repeats, 100,000 rows for growth, 2,000 bulk rows. Figures are rougher.",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.repeats, args.big, args.bulk_rows = 1, 1, 100_000, 2_000
    started = time.perf_counter()
    server = server_args(args.url)
    with psycopg.connect(dbname="postgres", **server) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
    results: dict = {
        "machine": {
            "cores": os.cpu_count(),
            "postgresql": pg_version,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {k: str(v) for k, v in vars(args).items()},
    }
    n, s, r = args.clients, args.seconds, args.repeats
    print(
        f"machine: {os.cpu_count()} cores, PostgreSQL {pg_version}; {n} client processes, "
        f"medians of {r} runs of {s:g} s",
        flush=True,
    )

    url = fresh_database(server, MAIN_DB)
    load_main(url)

    print("throughput", flush=True)
    for shape, hot in [("spread", False), ("hot", True)]:
        limit = median_throughput(
            f"limit: raw SQL, {shape}",
            r,
            lambda hot=hot: throughput(run_processes(raw_worker, n, url, hot, s), s),
        )
        results[f"limit_{shape}"] = limit
        for dispatch in ["worker", "inline"]:
            service = median_throughput(
                f"service: create_refund, {shape}, {dispatch}",
                r,
                lambda hot=hot, dispatch=dispatch: throughput(
                    run_processes(service_worker, n, url, hot, s, tail=(dispatch,)), s
                ),
            )
            service["ratio_to_limit"] = ratio(service["per_second"], limit["per_second"])
            results[f"service_{shape}_{dispatch}"] = service

    key = subprocess.run(
        [sys.executable, "manage.py", "create_api_key", "bench"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": url},
    ).stdout.strip()
    gunicorn, base = start_gunicorn(url, workers=4)
    try:
        errors = []

        def http_run():
            gathered = run_processes(http_worker, n, base, key, s)
            errors.append(sum(g[2] for g in gathered))
            return throughput(gathered, s)

        http = median_throughput("http: POST /v1/refunds, gunicorn x4", r, http_run)
        http["non_200"] = sum(errors)
        http["ratio_to_service"] = ratio(
            http["per_second"], results["service_spread_worker"]["per_second"]
        )
        results["http_spread_worker"] = http
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(30)

    print("single requests (ms each, median of 3 x 200)", flush=True)
    single = measure_in_django(url, "replay_and_growth", 200)
    single["replay_ratio_to_create"] = ratio(single["replay_ms"], single["create_ms"])
    single["growth_ratio"] = ratio(single["10k_prior_refunds_ms"], single["no_prior_refunds_ms"])
    results["single"] = single
    for label, value in single.items():
        print(f"  {label:<40} {value:9.3f}", flush=True)

    print(f"bulk_refund, {args.bulk_rows:,} rows (worker mode)", flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        results["bulk_refund_rows_per_second"] = bulk_rows_per_second(
            url, args.bulk_rows, Path(workdir)
        )
    print(f"  {results['bulk_refund_rows_per_second']:.0f} rows/s", flush=True)

    print(f"growth: 10,000 vs {args.big:,} charges (each with one refund, two entries)", flush=True)
    for label, name, rows in [("small", SMALL_DB, 10_000), ("big", BIG_DB, args.big)]:
        size_url = fresh_database(server, name)
        load_ledger(size_url, rows)
        verify_s, verify_kb, output = timed_subprocess(["verify_ledger"], size_url)
        assert "the books agree" in output, output
        pages = measure_in_django(size_url, "changelist_ms")
        results[f"ledger_{label}"] = {
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
    small, big = results["ledger_small"], results["ledger_big"]
    results["changelist_ratio_big_to_small"] = {
        k: ratio(big["changelist_ms"][k], small["changelist_ms"][k]) for k in small["changelist_ms"]
    }

    results["seconds"] = time.perf_counter() - started
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_summary(results)
    print(f"wrote {args.out} in {results['seconds']:.0f} s", flush=True)


def print_summary(res: dict) -> None:
    rows = [
        (
            "service / limit, spread (worker)",
            res["service_spread_worker"]["ratio_to_limit"],
            ">= 0.6",
        ),
        (
            "service / limit, spread (inline)",
            res["service_spread_inline"]["ratio_to_limit"],
            "(info)",
        ),
        ("service / limit, hot (worker)", res["service_hot_worker"]["ratio_to_limit"], ">= 0.5"),
        ("service / limit, hot (inline)", res["service_hot_inline"]["ratio_to_limit"], "(info)"),
        ("http / service (worker)", res["http_spread_worker"]["ratio_to_service"], ">= 0.5"),
        ("http p99 ms", res["http_spread_worker"]["p99_ms"], "< 50"),
        ("replay / create", res["single"]["replay_ratio_to_create"], "<= 0.5"),
        ("10k prior refunds / none", res["single"]["growth_ratio"], "<= 1.2"),
        *[
            (f"changelist {k} big / small", v, "<= 2")
            for k, v in res["changelist_ratio_big_to_small"].items()
        ],
        ("verify_ledger big, s", res["ledger_big"]["verify_ledger_s"], "< 60"),
        ("verify_ledger big, peak MB", res["ledger_big"]["verify_ledger_peak_mb"], "< 500"),
    ]
    print("summary")
    for label, value, target in rows:
        print(f"  {label:<40} {value:9.2f}   target {target}")


if __name__ == "__main__":
    main()
