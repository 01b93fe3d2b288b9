"""A simulated year of refunds (issue 32): what stays forever, what expires, and whether
the admin, verify_ledger and the restore drill stay fast once purge_expired has run.

    python tests/bench/year.py [--refunds 360000] [--endpoints 3] [--url postgres://root@127.0.0.1:5432/postgres]
                               [--no-drill] [--no-vacuum-full] [--keep] [--out FILE]

Creates its own database (bench_year, plus BENCH_DB_SUFFIX), migrates it and loads with
SQL (column lists from the models, columns.py) --refunds refunds dated evenly across the
365 days before now, two on each charge, oldest first as a database fills: 95% succeeded,
every 20th failed and released; each with its ledger entries (charge_succeeded per
charge, refund_reserved, then refund_succeeded or refund_released), its events
(charge.succeeded per charge; refund.created and charge.refunded at the refund, then
refund.updated two seconds later, and refund.failed for a failed one) carrying the API's
JSON of the object, one delivered delivery per event and endpoint (--endpoints enabled
endpoints for every event), one provider event (the provider's webhook about the refund,
three seconds later), and an idempotency key for every other refund (the API's). Then
VACUUM ANALYZE, as autovacuum leaves a database.

It measures each table's pg_total_relation_size and the database's after loading, after
`manage.py purge_expired`, after plain VACUUM, and after VACUUM FULL of the purged tables
(--no-vacuum-full skips it); and the admin's event and delivery lists and dashboard
(median of 5 through Django's test client, as a superuser), verify_ledger and the restore
drill (scripts/backup-check; --no-drill skips it) before the purge and after the VACUUM.
Drops its database at the end unless --keep. docs/benchmarks.md reports a run. The
statements it loads with are in year_load.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import dj_database_url
import psycopg
from psycopg import sql
from year_load import LOAD, payloads

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
if not re.fullmatch(r"[a-z0-9_]{0,20}", SUFFIX):
    raise SystemExit(f"BENCH_DB_SUFFIX must be up to 20 of a-z, 0-9 and _: {SUFFIX!r}")
DB = f"bench_year{SUFFIX}"

# What is kept forever and what expires (docs/operating/retention.md).
FOREVER = ("ledger_app_charge", "ledger_app_refund", "ledger_app_ledgerentry")
DAYS_30 = ("ledger_app_event", "ledger_app_webhookdelivery")
DAYS_90 = ("ledger_app_idempotencyrecord", "ledger_app_providerevent")
TABLES = FOREVER + DAYS_30 + DAYS_90


def server_args(url: str) -> dict:
    cfg = dj_database_url.parse(url)
    return {"host": cfg["HOST"], "port": cfg["PORT"], "user": cfg["USER"]}


def sizes(conn) -> dict:
    """Bytes: each table with its indexes and TOAST, its indexes alone, live rows, and the
    database."""
    found = {}
    for table in TABLES:
        total, indexes, rows = conn.execute(
            sql.SQL(
                "SELECT pg_total_relation_size({name}), pg_indexes_size({name}), "
                "(SELECT count(*) FROM {table})"
            ).format(name=sql.Literal(table), table=sql.Identifier(table))
        ).fetchone()
        found[table] = {"bytes": total, "index_bytes": indexes, "rows": rows}
    found["database"] = {
        "bytes": conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    }
    return found


def timed(command: list[str], env: dict) -> tuple[float, str, int]:
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - began, done.stdout + done.stderr, done.returncode


def pages_ms(client) -> dict:
    """The admin's event list, delivery list and dashboard: median ms of 5 GETs (after one
    to warm), each answered 200."""
    pages = {
        "events_list": "/admin/ledger_app/event/",
        "deliveries_list": "/admin/ledger_app/webhookdelivery/",
        "dashboard": "/admin/",
    }
    timings = {}
    for label, path in pages.items():
        assert client.get(path).status_code == 200, path
        runs = []
        for _ in range(5):
            began = time.perf_counter()
            response = client.get(path)
            runs.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        timings[label] = statistics.median(runs)
    return timings


def checks(client, env: dict, drill: bool) -> dict:
    """The pages, verify_ledger and the restore drill, timed."""
    found: dict = {"pages_ms": pages_ms(client)}
    seconds, output, code = timed([sys.executable, "manage.py", "verify_ledger"], env)
    if code != 0 or "the books agree" not in output:
        raise RuntimeError(f"verify_ledger: {output[-1000:]}")
    found["verify_ledger_s"] = seconds
    if drill:
        seconds, output, code = timed([str(ROOT / "scripts" / "backup-check"), "--json"], env)
        if code != 0:
            raise RuntimeError(f"the restore drill exited {code}: {output[-2000:]}")
        summary, _, report = output.partition("\n")
        found["drill_s"] = seconds
        found["drill_summary"] = summary
        found["drill_dump_bytes"] = json.loads(report).get("dump_size") if report.strip() else None
    return found


def per_refund(stage: dict, refunds: int) -> dict:
    """Bytes per refund: what is kept forever (charge share, refund, ledger entries), and
    what expires (events and deliveries after 30 days; keys and provider events after 90)."""

    def of(tables):
        return sum(stage[t]["bytes"] for t in tables) / refunds

    return {"forever": of(FOREVER), "days_30": of(DAYS_30), "days_90": of(DAYS_90)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--refunds",
        type=int,
        default=360_000,
        help="Refunds over the year (default 360,000: a tenth of issue 32's 3.6 million).",
    )
    parser.add_argument("--endpoints", type=int, default=3)
    parser.add_argument(
        "--url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--no-drill", action="store_true", help="Skip the restore drill.")
    parser.add_argument("--no-vacuum-full", action="store_true", help="Skip VACUUM FULL.")
    parser.add_argument("--keep", action="store_true", help="Keep the database to look into.")
    parser.add_argument("--out", type=Path, help="Also write the figures here as JSON.")
    args = parser.parse_args()
    server = server_args(args.url)
    url = f"postgres://{server['user']}@{server['host']}:{server['port']}/{DB}"
    env = {**os.environ, "DATABASE_URL": url}
    env.setdefault("DJANGO_SECRET_KEY", "throwaway-bench-year-0123456789-abcdefghijklmnop")
    results: dict = {
        "refunds": args.refunds,
        "charges": (args.refunds + 1) // 2,
        "endpoints": args.endpoints,
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_at_start": os.getloadavg(),
        },
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
        version = conn.execute("SHOW server_version").fetchone()
        assert version is not None
        results["machine"]["postgresql"] = version[0]
    try:
        run_year(args, url, env, results)
    finally:
        if not args.keep:
            with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    results["machine"]["load_average_at_end"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def run_year(args, url: str, env: dict, results: dict) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(DATABASE_URL=url, DJANGO_SECRET_KEY=env["DJANGO_SECRET_KEY"])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backoffice.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from ledger_app.models import WebhookEndpoint

    endpoints = [
        WebhookEndpoint.objects.create(
            url=f"https://hooks{n}.example.com/refunds", enabled_events=["*"], secret="whsec_year"
        ).pk
        for n in range(args.endpoints)
    ]
    params = {
        "refunds": args.refunds,
        "charges": results["charges"],
        "endpoints": endpoints,
        **payloads(),
    }
    print(
        f"loading a year: {args.refunds:,} refunds on {results['charges']:,} charges, "
        f"{args.endpoints} endpoints  [load {os.getloadavg()[0]:.1f}]",
        flush=True,
    )
    load_started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for label, statement in LOAD:
            began = time.perf_counter()
            conn.execute(statement, params)
            print(f"  {label}: {time.perf_counter() - began:.1f} s", flush=True)
        began = time.perf_counter()
        conn.execute("VACUUM (ANALYZE)")  # as autovacuum leaves a database
        print(f"  vacuum analyze: {time.perf_counter() - began:.1f} s", flush=True)
        results["load_s"] = time.perf_counter() - load_started
        stages = results["sizes"] = {"loaded": sizes(conn)}
    print(f"loaded in {results['load_s']:.0f} s", flush=True)

    setup_test_environment()
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "x")
    client = Client()
    client.force_login(user)
    results["before"] = checks(client, env, not args.no_drill)
    print(f"before the purge: {shown(results['before'])}", flush=True)

    seconds, output, code = timed([sys.executable, "manage.py", "purge_expired"], env)
    if code != 0:
        raise RuntimeError(f"purge_expired exited {code}: {output[-2000:]}")
    results["purge_s"], results["purge_output"] = seconds, output
    print(f"purge_expired: {seconds:.1f} s\n  " + "\n  ".join(output.splitlines()[:3]), flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        stages["purged"] = sizes(conn)
        for stage, statement in [("vacuumed", "VACUUM"), ("vacuum_full", "VACUUM FULL")]:
            if stage == "vacuum_full" and args.no_vacuum_full:
                continue
            began = time.perf_counter()
            for table in DAYS_30 + DAYS_90:
                conn.execute(f"{statement} {table}")
            results[f"{stage}_s"] = time.perf_counter() - began
            stages[stage] = sizes(conn)
            if stage == "vacuumed":
                conn.execute("ANALYZE")
                results["after"] = checks(client, env, not args.no_drill)
                print(f"after purge and VACUUM: {shown(results['after'])}", flush=True)
    results["per_refund_bytes"] = {
        stage: per_refund(found, args.refunds) for stage, found in stages.items()
    }
    print_sizes(stages, results)


def shown(found: dict) -> str:
    pages = ", ".join(f"{k} {v:.0f} ms" for k, v in found["pages_ms"].items())
    drill = f", restore drill {found['drill_s']:.1f} s" if "drill_s" in found else ""
    return f"{pages}; verify_ledger {found['verify_ledger_s']:.1f} s{drill}"


def print_sizes(stages: dict, results: dict) -> None:
    names = list(stages)
    print(f"{'MB':<30}" + "".join(f"{n:>14}" for n in names))
    for table in (*TABLES, "database"):
        print(
            f"{table:<30}" + "".join(f"{stages[n][table]['bytes'] / 2**20:>14.1f}" for n in names)
        )
    for table in TABLES:
        print(
            f"{'  rows ' + table:<30}" + "".join(f"{stages[n][table]['rows']:>14,}" for n in names)
        )
    print("bytes per refund: " + json.dumps(results["per_refund_bytes"]))
    print(
        "VACUUM "
        + ", ".join(
            f"{k}: {results[k]:.1f} s" for k in ("vacuumed_s", "vacuum_full_s") if k in results
        )
    )


if __name__ == "__main__":
    sys.exit(main())
