"""The limit: the refund's own SQL through raw psycopg, with nothing of Django around it,
PostgreSQL's own ceiling for the service's rate (the throughput phase, phases_service.py)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import columns
from api_objects import charge_object, refund_object

# The statements create_refund sends for a keyed refund, in its order, in one transaction.
# Named parameters: the column order is the models', so no statement relies on it.
CLAIM_SQL = columns.insert_values(
    "ledger_app.IdempotencyRecord",
    {
        "owner": "%(actor)s",  # the API key's own keys (services/idempotency.py owner_of)
        "key": "%(key)s",
        "operation": "'refund.create'",
        "fingerprint": "%(fingerprint)s",
        "request_params": "%(params)s",
        "refund_id": "%(refund)s",
        "charge_id": "NULL",
    },
    "ON CONFLICT (owner, key) DO NOTHING RETURNING id",
)
# The charge's row as the service's select_for_update reads it: every column.
CHARGE_COLUMNS = ", ".join(columns.names("ledger_app.Charge"))  # the model's own names
LOCK_SQL = f"SELECT {CHARGE_COLUMNS} FROM ledger_app_charge WHERE id = %(charge)s FOR UPDATE"  # noqa: S608
REFUND_SQL = columns.insert_values(
    "ledger_app.Refund",
    {
        "amount": "1",
        "currency": "%(currency)s",
        "status": "'pending'",
        "id": "%(refund)s",
        "charge_id": "%(charge)s",
        "source": "'api'",
        "actor": "%(actor)s",
        "provider_idempotency_key": "%(provider_key)s",
    },
)
UPDATE_SQL = (
    "UPDATE ledger_app_charge SET updated_at = now(), amount_refunded = %(refunded)s "
    "WHERE id = %(charge)s"
)
ENTRY_SQL = columns.insert_values(
    "ledger_app.LedgerEntry",
    {
        "charge_id": "%(charge)s",
        "refund_id": "%(refund)s",
        "kind": "'refund_reserved'",
        "amount": "1",
        "refunded_delta": "1",
        "currency": "%(currency)s",
        "actor": "%(actor)s",
    },
    "RETURNING id",
)
EVENTS_SQL = columns.insert(
    "ledger_app.Event",
    {
        "id": "e.id",
        "type": "e.type",
        "data_object": "e.data_object::jsonb",
        "previous_attributes": "e.previous::jsonb",
        "request_idempotency_key": "%(key)s",
        "charge_id": "%(charge)s",
        "refund_id": "e.refund",
    },
    "FROM (VALUES (%(refund_event)s, 'refund.created', %(refund_json)s, NULL, %(refund)s), "
    "(%(charge_event)s, 'charge.refunded', %(charge_json)s, %(previous)s, NULL)) "
    "AS e(id, type, data_object, previous, refund)",
)
ENDPOINTS_SQL = """
SELECT id, url, enabled_events, description, metadata, status, secret, created_at, deleted_at
FROM ledger_app_webhookendpoint WHERE deleted_at IS NULL AND status = 'enabled'
ORDER BY created_at, id LIMIT 32
"""  # WEBHOOK_ENDPOINTS_TOTAL's default: the service reads no more (selectors.live_endpoints)
ACTOR = "api_key:sk_test_bench"
NEWEST_REFUNDS_SQL = """
SELECT id, amount, currency, status, created_at FROM ledger_app_refund
WHERE charge_id = %(charge)s ORDER BY created_at DESC, id DESC LIMIT 10
"""
# The two shapes --limit-shape chooses between (see raw_refund).
LIMIT_SHAPES = ("statements", "batched")


def raw_refund(conn, charge: str, shape: str = "statements") -> None:
    """One keyed refund of 1 on `charge`, in one transaction, raw psycopg, plain execute.

    statements: claim the key, lock the charge, insert the refund, update the charge,
    insert the ledger entry, insert the two events (refund.created, charge.refunded) in one
    statement, read the live webhook endpoints: one round trip each.
    batched: as the service does it since it writes in one round trip: claim the key, read
    the endpoints, lock the charge, read its newest refunds (for its snapshot), then the
    refund, the charge, the entry and the events in one statement (data-modifying CTEs)."""
    refund, key = "re_" + uuid.uuid4().hex[:24], uuid.uuid4().hex
    params = json.dumps({"charge": charge, "amount": 1, "reason": "", "metadata": {}, "note": ""})
    fingerprint = hashlib.sha256(params.encode()).hexdigest()
    values = {
        "key": key,
        "fingerprint": fingerprint,
        "params": params,
        "refund": refund,
        "charge": charge,
        "actor": ACTOR,
        "provider_key": f"refund:{refund}",
    }
    with conn.transaction():
        conn.execute(CLAIM_SQL, values).fetchone()
        if shape == "batched":
            conn.execute(ENDPOINTS_SQL).fetchall()
        cursor = conn.execute(LOCK_SQL, values)
        row = dict(zip([c.name for c in cursor.description], cursor.fetchone(), strict=True))
        before = row["amount_refunded"]
        refund_json = refund_object(refund, charge, int(time.time()))
        values.update(
            currency=row["currency"],
            refunded=before + 1,
            refund_event="evt_" + uuid.uuid4().hex[:24],
            refund_json=json.dumps(refund_json),
            charge_event="evt_" + uuid.uuid4().hex[:24],
            charge_json=json.dumps(charge_object(row, before + 1, refund_json)),
            previous=json.dumps({"amount_refunded": before}),
        )
        writes = [REFUND_SQL, UPDATE_SQL, ENTRY_SQL, EVENTS_SQL]
        if shape == "batched":
            conn.execute(NEWEST_REFUNDS_SQL, values).fetchall()
            *first, last = writes
            ctes = ", ".join(f"w{n} AS ({sql})" for n, sql in enumerate(first))
            conn.execute(f"WITH {ctes} {last}", values)
        else:
            for sql in writes:
                conn.execute(sql, values)
            conn.execute(ENDPOINTS_SQL).fetchall()
