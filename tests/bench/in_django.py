"""Measurements made inside Django, each in a fresh process set up on the database it is
given (measure_in_django): single refunds and their replays, the admin's changelists
through the test client, a webhook endpoint, and the plans of purge_expired's batches."""

from __future__ import annotations

import multiprocessing
import re
import statistics
import time
import uuid

from databases import (
    GROWN,
    SPREAD_CHARGES,
    UNTOUCHED,
)
from workers import django_setup, gather


def measure_in_django(url, func_name, *args):
    """Run one of the functions below in a fresh process with Django on `url`."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_in_django, args=(url, func_name, args, results))
    proc.start()
    return gather(results, [proc], func_name)[0]


def _in_django(url, func_name, args, results):
    django_setup(url, "worker")
    results.put(globals()[func_name](*args))


def replay_and_growth(count: int) -> dict:
    from ledger_app.refunds.services import RefundRequest, create_refund

    def per_op(charge, keyed_replay=False):
        key = uuid.uuid4().hex
        create_refund(RefundRequest(charge_id=charge, amount=1, idempotency_key=key, source="api"))
        began = time.perf_counter()
        for _ in range(count):
            if keyed_replay:
                create_refund(
                    RefundRequest(charge_id=charge, amount=1, idempotency_key=key, source="api")
                )
            else:
                create_refund(
                    RefundRequest(
                        charge_id=charge, amount=1, idempotency_key=uuid.uuid4().hex, source="api"
                    )
                )
        return (time.perf_counter() - began) / count * 1000

    fresh = "ch_" + f"{SPREAD_CHARGES:020d}"
    create_ms = statistics.median(per_op(fresh) for _ in range(3))
    replay_ms = statistics.median(per_op(fresh, keyed_replay=True) for _ in range(3))
    # Not HOT: by now the throughput runs have made thousands of refunds on it.
    none_ms = statistics.median(per_op(UNTOUCHED) for _ in range(3))
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


def webhook_endpoint(url: str = "https://hooks.example.com/bench") -> str:
    """An enabled endpoint for every event: the refund load's events get a delivery each,
    as the expired ones have (the secret is encrypted by the model's field)."""
    from ledger_app.models import WebhookEndpoint

    endpoint = WebhookEndpoint.objects.create(url=url, enabled_events=["*"], secret="whsec_bench")
    return endpoint.pk


def purge_batch_plans() -> list[dict]:
    """One batch of purge_expired's events, through the service itself (it stops after
    one), with every statement it sent to the event and delivery tables, its time, and its
    plan: EXPLAIN ANALYZE for a SELECT (run again: it reads the next batch), EXPLAIN for a
    DELETE (its rows are gone by then; the plan is what it was)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger_app.operations import retention

    asked = []

    def after_one_batch() -> bool:
        asked.append(1)
        return len(asked) > 1

    with CaptureQueriesContext(connection) as seen:
        retention.purge_expired(kinds=["events"], should_stop=after_one_batch)
    plans = []
    with connection.cursor() as cursor:
        for query in seen.captured_queries:
            sql = query["sql"]
            verb = sql.split(None, 1)[0].upper()
            tables = ("ledger_app_event", "ledger_app_webhookdelivery")
            if verb not in ("SELECT", "DELETE") or not any(t in sql for t in tables):
                continue
            explain = "EXPLAIN (ANALYZE, BUFFERS) " if verb == "SELECT" else "EXPLAIN "
            cursor.execute(explain + sql)
            # The statement and its plan with their 1,000 ids shortened, for reading.
            plan = "\n".join(row[0] for row in cursor.fetchall())
            plan = re.sub(r"'\{[^}]{100,}\}'", "'{...}'", plan)
            shown = re.sub(r"IN \(('[^']*'(, )?){3,}\)", "IN (...)", sql)
            plans.append({"sql": shown, "ms": float(query["time"]) * 1000, "plan": plan})
    return plans
