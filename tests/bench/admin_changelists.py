"""Admin changelist timings on PostgreSQL at a given table size (default 1,000,000).

    python tests/bench/admin_changelists.py [--rows N] [--url postgres://root@127.0.0.1:5432/postgres]

Creates its own database (bench_admin), loads N charges and N refunds with SQL (a third
of the refunds failed, so a third of the charges are not refunded), then times
each changelist page through Django's test client as a logged-in superuser (median of 5),
and the peak memory of the charges CSV export at a tenth of the rows and at all of them.
Ledger entries are not loaded: this measures the admin's lists, not the books.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import columns
import dj_database_url
import psycopg

ROOT = Path(__file__).resolve().parents[2]
DB = "bench_admin"

CHARGE_ID = "'ch_' || substr(md5(i::text), 1, 24)"
CURRENCY = "(ARRAY['usd','eur','jpy','gbp'])[1 + i %% 4]"
# Column lists from the models (columns.py): a new column cannot break the load.
LOAD = [
    columns.insert(
        "ledger_app.Charge",
        {
            "id": CHARGE_ID,
            "amount": "1000 + (i %% 5000)",
            "amount_refunded": "CASE WHEN i %% 3 = 0 THEN 0 ELSE 500 END",
            "currency": CURRENCY,
            "status": "CASE WHEN i %% 50 = 0 THEN 'failed' ELSE 'succeeded' END",
            "description": "'Order ' || i",
            "customer": "'cus_' || (i %% 100000)",
            "created_at": "now() - make_interval(secs => i)",
        },
        "FROM generate_series(1, %(rows)s) AS i",
    ),
    columns.insert(
        "ledger_app.Refund",
        {
            "id": "'re_' || substr(md5('r' || i::text), 1, 24)",
            "charge_id": CHARGE_ID,
            "amount": "500",
            "currency": CURRENCY,
            "status": "CASE WHEN i %% 3 = 0 THEN 'failed' WHEN i %% 1000 = 1 THEN 'unknown' "
            "ELSE 'succeeded' END",
            "reason": "'requested_by_customer'",
            "source": "'api'",
            "actor": "'api_key:bench'",
            "provider_idempotency_key": "'refund:re_' || substr(md5('r' || i::text), 1, 24)",
            "dispatch_attempts": "1",
            "created_at": "now() - make_interval(secs => i) + interval '1 second'",
        },
        "FROM generate_series(1, %(rows)s) AS i",
    ),
    "ANALYZE",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", default="postgres://root@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    server = dj_database_url.parse(args.url)
    connect: dict[str, Any] = {
        "host": server["HOST"],
        "port": server["PORT"],
        "user": server["USER"],
    }
    with psycopg.connect(dbname=server["NAME"], autocommit=True, **connect) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    url = f"postgres://{server['USER']}@{server['HOST']}:{server['PORT']}/{DB}"
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    started = time.perf_counter()
    with psycopg.connect(dbname=DB, autocommit=True, **connect) as db:
        for statement in LOAD:
            db.execute(statement, {"rows": args.rows} if "%(rows)s" in statement else None)
    print(
        f"loaded {args.rows:,} charges and {args.rows:,} refunds "
        f"in {time.perf_counter() - started:.1f} s"
    )

    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "backoffice.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "x")
    client = Client()
    client.force_login(user)
    a_charge = "ch_" + __import__("hashlib").md5(str(args.rows // 2).encode()).hexdigest()[:24]
    pages = [
        ("charges, unfiltered", "/admin/ledger_app/charge/", {}),
        (
            "charges, status + partly refunded",
            "/admin/ledger_app/charge/",
            {"status__exact": "succeeded", "refunded": "partial"},
        ),
        ("charges, currency", "/admin/ledger_app/charge/", {"currency": "jpy"}),
        ("charges, search by id", "/admin/ledger_app/charge/", {"q": a_charge}),
        ("charges, search by amount", "/admin/ledger_app/charge/", {"q": "12.34"}),
        ("charge page", f"/admin/ledger_app/charge/{a_charge}/change/", {}),
        ("refunds, unfiltered", "/admin/ledger_app/refund/", {}),
        ("refunds, status unknown", "/admin/ledger_app/refund/", {"status__exact": "unknown"}),
        ("refunds, search by charge id", "/admin/ledger_app/refund/", {"q": a_charge}),
        ("needs attention", "/admin/ledger_app/refundattention/", {}),
    ]
    print(f"{'page':<36} {'median ms':>10} {'max ms':>8}")
    for label, path, params in pages:
        timings = []
        for _ in range(5):
            began = time.perf_counter()
            response = client.get(path, params)
            timings.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, (label, response.status_code)
        print(f"{label:<36} {statistics.median(timings):>10.1f} {max(timings):>8.1f}")
    export_memory(client, args.rows, a_charge)


def export_memory(client, rows: int, a_charge: str) -> None:
    """Peak Python memory (tracemalloc) while the charges CSV export streams the newest
    tenth of the rows and then all of them: about 1x if it streams, about 10x if it read
    every row first. Seconds are with tracemalloc on, which slows Python down."""
    import tracemalloc

    from ledger_app.models import Charge

    tenth = max(rows // 10, 1)
    newest = Charge.objects.order_by("-created_at").values_list("created_at", flat=True)
    runs = [
        ("warm-up (one charge)", {"q": a_charge}),
        ("newest tenth", {"created_at__gte": newest[tenth - 1].isoformat()}),
        ("all", {}),
    ]
    print(f"\n{'csv export of charges':<36} {'rows':>10} {'seconds':>8} {'peak MiB':>9}")
    peaks = []
    for label, params in runs:
        tracemalloc.start()
        began = time.perf_counter()
        response = client.get("/admin/ledger_app/charge/export.csv", params)
        assert response.status_code == 200 and response.streaming, (label, response.status_code)
        exported = sum(piece.count(b"\r\n") for piece in response.streaming_content) - 1
        seconds = time.perf_counter() - began
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        print(f"{label:<36} {exported:>10,} {seconds:>8.1f} {peaks[-1] / 2**20:>9.2f}")
    print(f"peak memory, all rows vs the newest tenth: {peaks[2] / peaks[1]:.2f}x")


if __name__ == "__main__":
    main()
