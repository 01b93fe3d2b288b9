"""Where one refund's CPU goes: Python function calls, SQL round trips and transactions
per `create_refund`, its Python CPU unprofiled, and the functions that take the most time,
in one process.

    python tests/bench/profile_refund.py [--refunds 300] [--dispatch worker|inline] [--hot]
                                         [--top 25] [--url postgres://root@127.0.0.1:5432/postgres]

The levers in docs/benchmarks.md were measured with it, one at a time: the counts do not
depend on the machine's load, unlike the bench's rates. It loads the bench's main
database (bench_refunds, databases.py's loader) unless --reuse says it is loaded already.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import databases
import workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--refunds", type=int, default=300)
    parser.add_argument("--dispatch", choices=["worker", "inline"], default="worker")
    parser.add_argument("--hot", action="store_true", help="Every refund on one charge.")
    parser.add_argument(
        "--http",
        action="store_true",
        help="POST /v1/refunds through Django's test client (every middleware, DRF, the "
        "API key's check) rather than create_refund.",
    )
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--reuse", action="store_true", help="bench_refunds is loaded already.")
    args = parser.parse_args()

    server = databases.server_args(args.url)
    if args.reuse:
        url = databases.db_url(server, databases.MAIN_DB)
    else:
        url = databases.fresh_database(server, databases.MAIN_DB)
        databases.load_main(url, 100)
    # Inline sends in the request's own thread (no send pool), so the profiler and the
    # counters see them.
    os.environ["REFUND_INLINE_WAIT_SECONDS"] = "0"
    # The refunds go back to back from one client: the API's own limit (100 a second per
    # process by default) would answer some of them 429 and stop the count.
    os.environ.setdefault("API_RATE_LIMIT", "1000000/second")
    workers.django_setup(url, args.dispatch)

    from django.db import connection

    from ledger_app.refunds.services import RefundRequest, create_refund

    rng = random.Random(7)
    statements = {"sql": 0, "commits": 0}

    def count(execute, sql, params, many, context):
        statements["sql"] += 1
        return execute(sql, params, many, context)

    def refund() -> None:
        create_refund(
            RefundRequest(
                charge_id=workers.charge_for(args.hot, rng),
                amount=1,
                idempotency_key=uuid.uuid4().hex,
                source="api",
            )
        )

    if args.http:
        refund = _http_refund(args.hot, rng)

    for _ in range(20):  # imports, caches and connections, outside the counts
        refund()
    # Unprofiled first: this process's CPU per refund is the Python a refund costs (the
    # rest of its wall time is PostgreSQL's work and the round trips).
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.refunds):
        refund()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    # The wrapper's private _commit, which django-stubs do not describe.
    wrapper: Any = connection
    commit = wrapper._commit

    def counted_commit():
        statements["commits"] += 1
        return commit()

    wrapper._commit = counted_commit
    profile = cProfile.Profile()
    began = time.perf_counter()
    with connection.execute_wrapper(count):
        profile.enable()
        for _ in range(args.refunds):
            refund()
        profile.disable()
    elapsed = time.perf_counter() - began
    commits = statements["commits"]

    stats = pstats.Stats(profile)
    # Set by Stats itself; typeshed's Stats does not declare it.
    calls: int = stats.total_calls  # type: ignore[attr-defined]
    n = args.refunds
    print(
        f"{n} refunds, {args.dispatch} mode, {'one hot charge' if args.hot else 'spread'}: "
        f"{calls / n:,.0f} Python calls, {statements['sql'] / n:.1f} SQL "
        f"statements, {commits / n:.1f} commits per refund; {elapsed / n * 1000:.1f} ms each "
        "under the profiler"
    )
    print(
        f"unprofiled: {wall / n * 1000:.2f} ms each, of which {cpu / n * 1000:.2f} ms this "
        "process's CPU"
    )
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).strip_dirs().sort_stats(order).print_stats(args.top)
        print(f"--- by {order}\n" + out.getvalue().split("\n", 6)[-1])


def _http_refund(hot: bool, rng: random.Random) -> Callable[[], None]:
    """The HTTP form of the same refund: POST /v1/refunds through Django's test client."""
    from django.test import Client

    from ledger_app.access.api_keys import create_api_key

    secret = create_api_key(name=f"profile {uuid.uuid4().hex[:6]}")[1]
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {secret}")

    def refund() -> None:
        answer = client.post(
            "/v1/refunds",
            urlencode({"charge": workers.charge_for(hot, rng), "amount": "1"}),
            content_type="application/x-www-form-urlencoded",
            HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
        )
        assert answer.status_code == 200, answer.content[:300]

    return refund


if __name__ == "__main__":
    main()
