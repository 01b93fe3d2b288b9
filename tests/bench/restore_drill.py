"""The restore drill (scripts/backup-check) timed on a big ledger whose books agree.

    python tests/bench/restore_drill.py [--refunds 1000000] [--url postgres://root@127.0.0.1:5432/postgres]
                                        [--jobs 1[,2]] [--keep-dump FILE]

Creates its own database (restore_bench_<pid>) on the server, migrates it, fills it with SQL
(`--refunds` refunds on half as many charges, two each: 90% succeeded, 5% failed and
released, 5% pending or unknown; every ledger entry verify_ledger sums; an idempotency key
on every other refund; one event per charge and per refund), runs the drill on it, prints
the drill's summary and each step's time, and drops the database, also on failure.
docs/operating/backups.md reports the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import columns
import dj_database_url
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
CHARGE_AMOUNT = 10_000

# Refund j (1..N) is on charge (j + 1) / 2. Its amount and status follow from j, so every
# total is known in SQL without reading anything back.
# Ids look like real ones (24 characters that do not repeat from row to row), so the dump
# compresses about as a production one does, not as runs of zeros would.
CHARGE_ID = "'ch_' || substr(md5('charge' || i), 1, 24)"
CHARGE_OF = "'ch_' || substr(md5('charge' || ((j + 1) / 2)), 1, 24)"  # refund j's charge
REFUND_ID = "'re_' || substr(md5('refund' || j), 1, 24)"
AMOUNT = "(500 + (j % 7) * 100)"
STATUS = (
    "CASE j % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'pending' WHEN 2 THEN 'unknown' "
    "ELSE 'succeeded' END"
)
LIVE = "(j % 20 <> 0)"  # failed refunds released their amount
EXPRESSIONS = {
    "charge_id": CHARGE_ID,
    "charge_of": CHARGE_OF,
    "refund_id": REFUND_ID,
    "amount": AMOUNT,
    "status": STATUS,
    "live": LIVE,
}

# Column lists from the models (columns.py): a new column cannot break the load.
CHARGES = columns.insert(
    "ledger_app.Charge",
    {
        "id": "{charge_id}",
        "amount": "{charge_amount}",
        "amount_refunded": "(SELECT coalesce(sum({amount}) FILTER (WHERE {live}), 0) "
        "FROM generate_series(2 * i - 1, least(2 * i, {refunds})) AS j)",
        "currency": "'usd'",
        "status": "'succeeded'",
        "description": "'Order ' || i",
        "customer": "'cus_' || (i % 5000)",
        "provider_charge_id": "'ch_prov_' || i",
        "dispatch_attempts": "1",
        "created_at": "now() - make_interval(secs => {charges} - i + 60)",
    },
    "FROM generate_series(1, {charges}) AS i",
    composed=True,
)
REFUNDS = columns.insert(
    "ledger_app.Refund",
    {
        "id": "{refund_id}",
        "charge_id": "{charge_of}",
        "amount": "{amount}",
        "currency": "'usd'",
        "status": "{status}",
        "reason": "'requested_by_customer'",
        "source": "CASE WHEN j % 2 = 0 THEN 'api' ELSE 'admin' END",
        "actor": "'bench'",
        "provider_idempotency_key": "'refund:' || {refund_id}",
        "provider_refund_id": "CASE WHEN j % 20 > 2 OR j % 20 = 0 THEN 'pyr_' || j ELSE '' END",
        "status_detail": "CASE j % 20 WHEN 0 THEN 'card_declined' ELSE '' END",
        "dispatch_attempts": "CASE j % 20 WHEN 1 THEN 0 ELSE 1 END",
        "created_at": "now() - make_interval(secs => {refunds} - j)",
    },
    "FROM generate_series(1, {refunds}) AS j",
    composed=True,
)
# One row per (charge or refund, moment): charge_succeeded per charge; refund_reserved per
# refund; then refund_succeeded or refund_released (delta -amount) as its status says.
ENTRIES_FOR_CHARGES = columns.charge_succeeded_entries(composed=True)
ENTRIES_FOR_REFUNDS = columns.insert(
    "ledger_app.LedgerEntry",
    {
        "charge_id": "{charge_of}",
        "refund_id": "{refund_id}",
        "kind": "k.kind",
        "amount": "{amount}",
        "refunded_delta": "CASE k.kind WHEN 'refund_reserved' THEN {amount} "
        "WHEN 'refund_released' THEN -{amount} ELSE 0 END",
        "currency": "'usd'",
        "actor": "'bench'",
        "created_at": "now() - make_interval(secs => {refunds} - j)",
    },
    """FROM generate_series(1, {refunds}) AS j,
     LATERAL (VALUES ('refund_reserved'),
                     (CASE WHEN j % 20 = 0 THEN 'refund_released'
                           WHEN j % 20 > 2 THEN 'refund_succeeded' END)) AS k(kind)
WHERE k.kind IS NOT NULL""",
    composed=True,
)
KEYS = columns.insert(
    "ledger_app.IdempotencyRecord",
    {
        "key": "'bench-' || j",
        "operation": "'refund.create'",
        "fingerprint": "md5('a' || j) || md5('b' || j)",
        "request_params": "jsonb_build_object('charge', {charge_of}, 'amount', {amount}, "
        "'reason', 'requested_by_customer', 'metadata', '{{}}'::jsonb, 'note', '')",
        "refund_id": "{refund_id}",
        "charge_id": "NULL",
        "created_at": "now() - make_interval(secs => {refunds} - j)",
    },
    "FROM generate_series(2, {refunds}, 2) AS j",
    composed=True,
)
REFUND_EVENTS = columns.insert(
    "ledger_app.Event",
    {
        "id": "'evt_' || substr(md5('event' || j), 1, 24)",
        "type": "'refund.created'",
        "data_object": """jsonb_build_object('id', {refund_id}, 'object', 'refund',
           'amount', {amount}, 'charge', {charge_of}, 'currency', 'usd', 'status', 'pending',
           'reason', 'requested_by_customer', 'metadata', '{{}}'::jsonb,
           'created', extract(epoch FROM now())::bigint - ({refunds} - j),
           'balance_transaction', NULL, 'payment_intent', NULL, 'receipt_number', NULL,
           'ledger_status', 'pending', 'pending_reason', 'processing')""",
        "previous_attributes": "NULL",
        "request_idempotency_key": "CASE WHEN j % 2 = 0 THEN 'bench-' || j ELSE '' END",
        "charge_id": "{charge_of}",
        "refund_id": "{refund_id}",
        "created_at": "now() - make_interval(secs => {refunds} - j)",
    },
    "FROM generate_series(1, {refunds}) AS j",
    composed=True,
)
CHARGE_EVENTS = columns.insert(
    "ledger_app.Event",
    {
        "id": "'evt_' || substr(md5('charge event' || i), 1, 24)",
        "type": "'charge.succeeded'",
        "data_object": """jsonb_build_object('id', {charge_id}, 'object', 'charge',
           'amount', {charge_amount}, 'amount_refunded', 0, 'currency', 'usd',
           'status', 'succeeded', 'captured', true, 'paid', true, 'refunded', false,
           'customer', 'cus_' || (i % 5000), 'description', 'Order ' || i,
           'metadata', '{{}}'::jsonb, 'ledger_status', 'succeeded')""",
        "previous_attributes": "NULL",
        "charge_id": "{charge_id}",
        "refund_id": "NULL",
        "created_at": "now() - make_interval(secs => {charges} - i + 60)",
    },
    "FROM generate_series(1, {charges}) AS i",
    composed=True,
)


def server_args(url: str) -> dict:
    cfg = dj_database_url.parse(url)
    return {"host": cfg["HOST"], "port": cfg["PORT"], "user": cfg["USER"]}


def db_url(server: dict, name: str) -> str:
    return f"postgres://{server['user']}@{server['host']}:{server['port']}/{name}"


def step(label: str, started: float) -> float:
    now = time.monotonic()
    print(f"  {label}: {now - started:.1f}s", flush=True)
    return now


def build(url: str, refunds: int) -> dict:
    charges = (refunds + 1) // 2
    fragments = {
        **{name: sql.SQL(text) for name, text in EXPRESSIONS.items()},
        "charge_amount": sql.Literal(CHARGE_AMOUNT),
        "refunds": sql.Literal(refunds),
        "charges": sql.Literal(charges),
    }
    started = time.monotonic()
    env = {**os.environ, "DATABASE_URL": url}
    env.setdefault("DJANGO_SECRET_KEY", "throwaway-bench-restore-drill-0123456789-abcdefghijklmnop")
    subprocess.run(  # our own interpreter and manage.py
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
    )
    t = step("migrate", started)
    with psycopg.connect(url, autocommit=True) as conn:
        for label, statement in [
            ("charges", CHARGES),
            ("refunds", REFUNDS),
            ("charge ledger entries", ENTRIES_FOR_CHARGES),
            ("refund ledger entries", ENTRIES_FOR_REFUNDS),
            ("idempotency records", KEYS),
            ("refund events", REFUND_EVENTS),
            ("charge events", CHARGE_EVENTS),
        ]:
            conn.execute(sql.SQL(statement).format(**fragments))
            t = step(label, t)
        # As autovacuum leaves a production database: hint bits set, statistics known.
        conn.execute("VACUUM (ANALYZE)")
        t = step("vacuum analyze", t)
        sized = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        assert sized is not None
        size = sized[0]
    print(f"  built in {time.monotonic() - started:.1f}s, {size / 2**20:.0f} MB", flush=True)
    return {"charges": charges, "refunds": refunds, "build_seconds": time.monotonic() - started}


def run_drill(url: str, jobs: int, keep_dump: str | None, built: dict) -> int:
    drill = [str(ROOT / "scripts" / "backup-check"), "--json", f"--jobs={jobs}"]
    if keep_dump:
        drill.append(f"--keep-dump={keep_dump}")
    print(f"running scripts/backup-check --jobs={jobs}", flush=True)
    done = subprocess.run(  # our own script
        drill, cwd=ROOT, env={**os.environ, "DATABASE_URL": url}, capture_output=True, text=True
    )
    sys.stderr.write(done.stderr)
    summary, _, report_json = done.stdout.partition("\n")
    print(summary)
    report = json.loads(report_json) if report_json.strip() else {}
    print(
        json.dumps(
            {
                "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                f"{platform.system()} {platform.release()}",
                **built,
                "jobs": jobs,
                "drill_exit": done.returncode,
                "timings": report.get("timings"),
                "dump_size": report.get("dump_size"),
                "source_size": report.get("source_size"),
                "restored_size": report.get("restored_size"),
                "counts": report.get("counts"),
            },
            indent=2,
        ),
        flush=True,
    )
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refunds", type=int, default=1_000_000)
    parser.add_argument(
        "--url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"),
        help="the server to use (its database is only connected to, never changed)",
    )
    parser.add_argument(
        "--jobs",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1],
        help="the drill's pg_restore --jobs; a list (1,2) runs the drill once for each",
    )
    parser.add_argument("--keep-dump", metavar="FILE", help="keep the drill's dump here")
    args = parser.parse_args()

    server = server_args(args.url)
    name = f"restore_bench_{os.getpid()}"
    url = db_url(server, name)
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        print(f"building {name}: {args.refunds:,} refunds", flush=True)
        built = build(url, args.refunds)
        status = 0
        for jobs in args.jobs:
            status = max(status, run_drill(url, jobs, args.keep_dump, built))
        return status
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    sys.exit(main())
