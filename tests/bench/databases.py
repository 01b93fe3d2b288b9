"""The bench's databases: their names (BENCH_DB_SUFFIX keeps runs apart), creating and
dropping them, and loading them with SQL whose column lists come from the models
(columns.py): the main database's charges, the growth phase's ledgers, and the purge
phase's expired events."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import columns
import dj_database_url
import expiry
import psycopg
from api_objects import charge_object, refund_object

ROOT = Path(__file__).resolve().parents[2]


# BENCH_DB_SUFFIX keeps runs sharing a server apart (make test gives its own, and its
# quick run drops them when it ends).
DB_SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
if not re.fullmatch(r"[a-z0-9_]{0,20}", DB_SUFFIX):
    raise SystemExit(f"BENCH_DB_SUFFIX must be up to 20 of a-z, 0-9 and _: {DB_SUFFIX!r}")
MAIN_DB, SMALL_DB, BIG_DB, PURGE_DB = (
    f"bench_{name}{DB_SUFFIX}" for name in ("refunds", "small", "big", "purge")
)
SPREAD_CHARGES = 100_000
HOT = "ch_benchHotCharge0000000001"
GROWN = "ch_benchGrownCharge00000001"
UNTOUCHED = "ch_benchNoPriorRefunds00001"  # only the growth measurement refunds it
SLOW = "ch_slow_"  # charges whose refunds the simulated provider answers after its latency
SLOW_METADATA = json.dumps({"simulate_refund": "slow"})
CHARGE_ROWS = {"prefix": "ch_", "amount": 10**15, "refunded": 0, "metadata": "{}"}


def server_args(url: str) -> dict:
    cfg = dj_database_url.parse(url)
    return {"host": cfg["HOST"], "port": cfg["PORT"], "user": cfg["USER"]}


def db_url(server: dict, name: str) -> str:
    return f"postgres://{server['user']}@{server['host']}:{server['port']}/{name}"


def drop_databases(server: dict) -> None:
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        for name in (MAIN_DB, SMALL_DB, BIG_DB, PURGE_DB):
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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


# The loaders' INSERTs name what they give; every other column gets its model default
# (columns.py), so a new column cannot break them.
CHARGES_SQL = columns.insert(
    "ledger_app.Charge",
    {
        "id": "%(prefix)s || lpad(i::text, 20, '0')",
        "amount": "%(amount)s",
        "amount_refunded": "%(refunded)s",
        "currency": "'usd'",
        "status": "'succeeded'",
        "description": "'Order ' || i",
        "customer": "'cus_' || (i %% 1000)",
        "metadata": "%(metadata)s::jsonb",
        "created_at": "now() - make_interval(secs => i)",
    },
    "FROM generate_series(1, %(rows)s) AS i",
)
ONE_CHARGE_SQL = columns.insert_values(
    "ledger_app.Charge",
    {
        "id": "%(id)s",
        "amount": "%(amount)s",
        "amount_refunded": "%(refunded)s",
        "currency": "'usd'",
        "status": "'succeeded'",
    },
)
REFUND_ID = "'re_' || %(prefix)s || lpad(i::text, 20, '0')"
REFUNDS_SQL = columns.insert(
    "ledger_app.Refund",
    {
        "id": REFUND_ID,
        "charge_id": "%(charge)s",
        "amount": "%(amount)s",
        "currency": "'usd'",
        "status": "'succeeded'",
        "source": "'api'",
        "actor": "'bench'",
        "provider_idempotency_key": "'refund:' || " + REFUND_ID,
        "dispatch_attempts": "1",
        "created_at": "now() - make_interval(secs => i)",
    },
    "FROM generate_series(1, %(rows)s) AS i",
)
ENTRIES_SQL = columns.insert(
    "ledger_app.LedgerEntry",
    {
        "charge_id": "charge_id",
        "refund_id": "id",
        "kind": "kind",
        "amount": "amount",
        "refunded_delta": "CASE kind WHEN 'refund_reserved' THEN amount ELSE 0 END",
        "currency": "'usd'",
        "actor": "'bench'",
        "created_at": "created_at",
    },
    "FROM ledger_app_refund, (VALUES ('refund_reserved'), ('refund_succeeded')) AS k(kind)",
)


def load_main(url: str, slow_charges: int) -> None:
    """100,000 charges for spread load, a hot charge, a charge with 10,000 refunds, and
    `slow_charges` charges whose refunds the simulated provider answers slowly."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CHARGES_SQL, {**CHARGE_ROWS, "rows": SPREAD_CHARGES})
        conn.execute(
            CHARGES_SQL,
            {**CHARGE_ROWS, "prefix": SLOW, "metadata": SLOW_METADATA, "rows": slow_charges},
        )
        for charge, refunded in [(HOT, 0), (GROWN, 10_000), (UNTOUCHED, 0)]:
            conn.execute(ONE_CHARGE_SQL, {"id": charge, "amount": 10**15, "refunded": refunded})
        conn.execute(REFUNDS_SQL, {"prefix": "g", "charge": GROWN, "amount": 1, "rows": 10_000})
        conn.execute(ENTRIES_SQL)
        conn.execute("ANALYZE")


def slow_charge_ids(count: int) -> list[str]:
    return [f"{SLOW}{i:020d}" for i in range(1, count + 1)]


def load_ledger(url: str, rows: int) -> None:
    """`rows` charges, each with one succeeded refund and its two ledger entries."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            CHARGES_SQL,
            {"prefix": "ch_", "amount": 10_000, "refunded": 500, "metadata": "{}", "rows": rows},
        )
        conn.execute(
            REFUNDS_SQL.replace("%(charge)s", "'ch_' || lpad(i::text, 20, '0')"),
            {"prefix": "b", "amount": 500, "rows": rows},
        )
        conn.execute(ENTRIES_SQL)
        conn.execute("ANALYZE")


# The purge phase's expired rows: charges and refunds of their own (final, so the rule
# keeps none of their events), four events a refund (expiry.LIFE), one delivery each.
EXPIRED = "x"  # ids: ch_x..., re_x..., evt_x...
EXPIRED_EVENTS_SQL = expiry.events_sql(
    event_id="'evt_x' || lpad(i::text, 20, '0')",
    charge_id="'ch_x' || lpad(((i + 3) / 4)::text, 20, '0')",
    refund_id="'re_x' || lpad(((i + 3) / 4)::text, 20, '0')",
    # Oldest first, as a database fills: past the retention by a day, then a second apart.
    created_at="now() - make_interval(days => %(days)s + 1, secs => %(rows)s - i)",
    rest="FROM generate_series(1, %(rows)s) AS i, "
    "LATERAL (SELECT (%(life)s::text[])[1 + (i - 1) %% 4] AS e_type) AS t",
)
EXPIRED_DELIVERIES_SQL = expiry.deliveries_sql("left(e.id, 5) = 'evt_x'")


def load_expired(url: str, events: int, endpoint: str, days: int) -> None:
    """`events` events older than `days` (EVENT_RETENTION_DAYS) with one delivered delivery
    each to `endpoint`, on events / 4 refunded charges of their own whose books agree."""
    refunds = (events + 3) // 4
    sample = refund_object(expiry.REFUND_STAND_IN, expiry.CHARGE_STAND_IN, int(time.time()))
    charge = {
        "id": expiry.CHARGE_STAND_IN,
        "amount": 10_000,
        "currency": "usd",
        "metadata": {},
        "description": "Order 1",
        "customer": "cus_1",
        "created_at": datetime.now(UTC),
    }
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            CHARGES_SQL,
            {**CHARGE_ROWS, "prefix": f"ch_{EXPIRED}", "amount": 10_000, "refunded": 500}
            | {"rows": refunds},
        )
        conn.execute(
            REFUNDS_SQL.replace("%(charge)s", f"'ch_{EXPIRED}' || lpad(i::text, 20, '0')"),
            {"prefix": EXPIRED, "amount": 500, "rows": refunds},
        )
        conn.execute(f"{ENTRIES_SQL} WHERE left(id, 4) = 're_{EXPIRED}'")
        conn.execute(
            EXPIRED_EVENTS_SQL,
            {
                "rows": events,
                "days": days,
                "life": list(expiry.LIFE),
                "refund_json": json.dumps(sample),
                "charge_json": json.dumps(charge_object(charge, 500, sample)),
            },
        )
        conn.execute(EXPIRED_DELIVERIES_SQL, {"endpoints": [endpoint]})
        # As autovacuum leaves a database: otherwise it comes for the million new rows
        # in the middle of the windows measured (a first 1M run's baseline p99 was 55 ms).
        # Then a checkpoint, so that writing out the load is not what the refunds without
        # the purge wait on (a second run's baseline p99 was 208 ms).
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
