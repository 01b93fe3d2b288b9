"""What `make bench-year` loads (year.py): a year of refunds in SQL, one statement per
table, every row's ids, amounts, statuses and times following from its number, so that
every total is known in SQL; and the API's JSON its events and provider events carry."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import columns
import expiry
from api_objects import charge_object, refund_object

# Refund j (1..N) is on charge (j + 1) / 2, made at REFUND_AT: the year spread evenly,
# refund N now. Its amount and status follow from j, so every total is known in SQL.
REFUND_ID = "'re_' || substr(md5('refund' || j), 1, 24)"
CHARGE_OF = "'ch_' || substr(md5('charge' || ((j + 1) / 2)), 1, 24)"
CHARGE_ID = "'ch_' || substr(md5('charge' || i), 1, 24)"
FIRST_REFUND_OF = "'re_' || substr(md5('refund' || (2 * i - 1)), 1, 24)"
REFUND_AT = "(now() - interval '365 days' * ((%(refunds)s - j)::float8 / %(refunds)s))"
CHARGE_AT = (
    "(now() - interval '365 days' * ((%(refunds)s - (2 * i - 1))::float8 / %(refunds)s)"
    " - interval '1 hour')"
)
AMOUNT = "(500 + (j %% 7) * 100)"
FAILED = "(j %% 20 = 0)"
# What refund j's charge has refunded: the amounts of its refunds that were not released.
REFUNDED_OF_CHARGE = (
    "(SELECT coalesce(sum(" + AMOUNT + ") FILTER (WHERE NOT " + FAILED + "), 0) "
    "FROM generate_series(2 * i - 1, least(2 * i, %(refunds)s)) AS j)"
)
CHARGE_AMOUNT = 10_000

LOAD = [
    (
        "charges",
        columns.insert(
            "ledger_app.Charge",
            {
                "id": CHARGE_ID,
                "amount": str(CHARGE_AMOUNT),
                "amount_refunded": REFUNDED_OF_CHARGE,
                "currency": "'usd'",
                "status": "'succeeded'",
                "description": "'Order ' || i",
                "customer": "'cus_' || (i %% 5000)",
                "provider_charge_id": "'ch_prov_' || i",
                "dispatch_attempts": "1",
                "created_at": CHARGE_AT,
            },
            "FROM generate_series(1, %(charges)s) AS i",
        ),
    ),
    (
        "refunds",
        columns.insert(
            "ledger_app.Refund",
            {
                "id": REFUND_ID,
                "charge_id": CHARGE_OF,
                "amount": AMOUNT,
                "currency": "'usd'",
                "status": f"CASE WHEN {FAILED} THEN 'failed' ELSE 'succeeded' END",
                "reason": "'requested_by_customer'",
                "source": "CASE WHEN j %% 2 = 0 THEN 'api' ELSE 'admin' END",
                "actor": "'bench'",
                "provider_idempotency_key": "'refund:' || " + REFUND_ID,
                "provider_refund_id": "'re_prov_' || j",
                "status_detail": f"CASE WHEN {FAILED} THEN 'card_declined' ELSE '' END",
                "dispatch_attempts": "1",
                "created_at": REFUND_AT,
                "updated_at": REFUND_AT + " + interval '2 seconds'",
            },
            "FROM generate_series(1, %(refunds)s) AS j",
        ),
    ),
    (
        "charge ledger entries",
        columns.charge_succeeded_entries(),
    ),
    (
        "refund ledger entries",
        columns.insert(
            "ledger_app.LedgerEntry",
            {
                "charge_id": CHARGE_OF,
                "refund_id": REFUND_ID,
                "kind": "k.kind",
                "amount": AMOUNT,
                "refunded_delta": f"CASE k.kind WHEN 'refund_reserved' THEN {AMOUNT} "
                f"WHEN 'refund_released' THEN -{AMOUNT} ELSE 0 END",
                "currency": "'usd'",
                "actor": "'bench'",
                "created_at": REFUND_AT + " + make_interval(secs => k.after)",
            },
            "FROM generate_series(1, %(refunds)s) AS j, LATERAL (VALUES ('refund_reserved', 0), "
            f"(CASE WHEN {FAILED} THEN 'refund_released' ELSE 'refund_succeeded' END, 2)) "
            "AS k(kind, after)",
        ),
    ),
    (
        "idempotency keys",
        columns.insert(
            "ledger_app.IdempotencyRecord",
            {
                "key": "'order-' || j || '-refund'",
                "operation": "'refund.create'",
                "fingerprint": "md5('a' || j) || md5('b' || j)",
                "request_params": f"jsonb_build_object('charge', {CHARGE_OF}, 'amount', {AMOUNT},"
                " 'reason', 'requested_by_customer', 'metadata', '{}'::jsonb, 'note', '')",
                "refund_id": REFUND_ID,
                "charge_id": "NULL",
                "created_at": REFUND_AT,
            },
            "FROM generate_series(2, %(refunds)s, 2) AS j",
        ),
    ),
    (
        "charge events",
        expiry.events_sql(
            event_id="'evt_' || substr(md5('charge event' || i), 1, 24)",
            charge_id=CHARGE_ID,
            refund_id=FIRST_REFUND_OF,  # the template's stand-in only: refund_id stays NULL
            created_at=CHARGE_AT,
            rest="FROM generate_series(1, %(charges)s) AS i, "
            "LATERAL (SELECT 'charge.succeeded' AS e_type) AS t",
        ),
    ),
    (
        "refund events",
        expiry.events_sql(
            event_id="'evt_' || substr(md5('event' || j || e_type), 1, 24)",
            charge_id=CHARGE_OF,
            refund_id=REFUND_ID,
            created_at=REFUND_AT + " + make_interval(secs => t.after)",
            rest="FROM generate_series(1, %(refunds)s) AS j, LATERAL (VALUES "
            "('refund.created', 0), ('charge.refunded', 0), ('refund.updated', 2), "
            f"(CASE WHEN {FAILED} THEN 'refund.failed' END, 2)) AS t(e_type, after) "
            "WHERE t.e_type IS NOT NULL",
        ),
    ),
    ("webhook deliveries", expiry.deliveries_sql("true")),
    (
        "provider events",
        columns.insert(
            "ledger_app.ProviderEvent",
            {
                "id": "'evt_prov_' || substr(md5('provider' || j), 1, 20)",
                "type": "'charge.refund.updated'",
                "payload": "replace(replace(%(refund_json)s, "
                f"'{expiry.REFUND_STAND_IN}', 're_prov_' || j), "
                f"'{expiry.CHARGE_STAND_IN}', 'ch_prov_' || ((j + 1) / 2))::jsonb",
                "outcome": "'settled ' || " + REFUND_ID,
                "received_at": REFUND_AT + " + interval '3 seconds'",
            },
            "FROM generate_series(1, %(refunds)s) AS j",
        ),
    ),
]


def payloads() -> dict:
    """The API's JSON of a refund and of a charge that lists it (the bench's own shapes),
    with stand-ins for their ids."""

    refund = refund_object(expiry.REFUND_STAND_IN, expiry.CHARGE_STAND_IN, int(time.time()))
    refund["status"] = "succeeded"
    charge = {
        "id": expiry.CHARGE_STAND_IN,
        "amount": CHARGE_AMOUNT,
        "currency": "usd",
        "metadata": {},
        "description": "Order 1",
        "customer": "cus_1",
        "created_at": datetime.now(UTC),
    }
    return {
        "refund_json": json.dumps(refund),
        "charge_json": json.dumps(charge_object(charge, 500, refund)),
    }
