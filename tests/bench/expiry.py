"""The purge phase's and the year's PostgreSQL side: raw-SQL loaders of events and their
deliveries (column lists from the models, columns.py), and LockWatch, which samples
pg_stat_activity and pg_locks while refunds and purge_expired share the database.

A sample every 0.1 s sees a transaction or a lock wait only while it lasts: one shorter
than the interval may fall between two samples, so the longest seen is a lower bound that
is exact to about 0.1 s, which is what a "long lock" needs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import columns
import psycopg

# Event payloads: the JSON of the API's objects (the bench's refund_object and
# charge_object) with these stand-ins replaced, row by row, by the row's own ids.
REFUND_STAND_IN = "re_STANDIN"
CHARGE_STAND_IN = "ch_STANDIN"
# A charge's life as its events tell it: imported (charge.succeeded), a refund made
# (refund.created, charge.refunded with the refund in its list), the refund settled
# (refund.updated). Events of a charge carry the charge's JSON, of a refund the refund's.
LIFE = ("charge.succeeded", "refund.created", "charge.refunded", "refund.updated")


def payload(refund_id: str, charge_id: str) -> str:
    """SQL for an event's data_object: the template of its type (%(refund_json)s or
    %(charge_json)s, by the type in `e_type`) with the stand-ins replaced."""
    return (
        "replace(replace(CASE WHEN e_type LIKE 'refund.%%' THEN %(refund_json)s "
        f"ELSE %(charge_json)s END, '{REFUND_STAND_IN}', {refund_id}), "
        f"'{CHARGE_STAND_IN}', {charge_id})::jsonb"
    )


def events_sql(*, event_id: str, charge_id: str, refund_id: str, created_at: str, rest: str) -> str:
    """INSERT of events, one per row of `rest`, which names `e_type` (one of LIFE)."""
    return columns.insert(
        "ledger_app.Event",
        {
            "id": event_id,
            "type": "e_type",
            "data_object": payload(refund_id, charge_id),
            "previous_attributes": "CASE e_type WHEN 'charge.refunded' THEN "
            "'{\"amount_refunded\": 0}'::jsonb WHEN 'refund.updated' THEN "
            '\'{"status": "pending"}\'::jsonb END',
            "charge_id": charge_id,
            "refund_id": f"CASE WHEN e_type LIKE 'refund.%%' THEN {refund_id} END",
            "created_at": created_at,
        },
        rest,
    )


def deliveries_sql(where: str) -> str:
    """INSERT of one delivered delivery per event matching `where` (on `e`) and endpoint
    in %(endpoints)s, created with its event, delivered a second later."""
    delivered = "e.created_at + interval '1 second'"
    return columns.insert(
        "ledger_app.WebhookDelivery",
        {
            "event_id": "e.id",
            "endpoint_id": "ep.id",
            "status": "'delivered'",
            "attempts": "1",
            "next_attempt_at": "e.created_at",
            "last_status_code": "200",
            "delivered_at": delivered,
            "created_at": "e.created_at",
        },
        f"FROM ledger_app_event e, unnest(%(endpoints)s::text[]) AS ep(id) WHERE {where}",
    )


class LockWatch:
    """Samples, every `interval` seconds, in the database `dbname`: how long the backend
    named `application` (the purge's, through PGAPPNAME) has been in its transaction, the
    longest any backend has been waiting for a lock (pg_locks.waitstart) and how many
    wait, what each other active backend was waiting for (its wait event, or "CPU" when
    it had none), and how many checkpoints the server has begun. `window(start, end)`
    gives the figures of the samples taken between two time.monotonic() readings."""

    def __init__(self, server: dict, dbname: str, application: str, interval: float = 0.1):
        self.server, self.dbname, self.application = server, dbname, application
        self.interval = interval
        self.samples: list[tuple[float, float, float, int, list[str], int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LockWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    SAMPLE = """
    SELECT
      (SELECT max(extract(epoch FROM clock_timestamp() - xact_start))
         FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = %(application)s),
      (SELECT max(extract(epoch FROM clock_timestamp() - l.waitstart))
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE NOT l.granted AND a.datname = current_database()),
      (SELECT count(DISTINCT l.pid)
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE NOT l.granted AND a.datname = current_database()),
      (SELECT array_agg(coalesce(wait_event_type || ':' || wait_event, 'CPU'))
         FROM pg_stat_activity
        WHERE datname = current_database() AND state = 'active'
          AND application_name <> %(application)s AND pid <> pg_backend_pid()),
      (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)
    """

    def _watch(self) -> None:
        with psycopg.connect(dbname=self.dbname, autocommit=True, **self.server) as conn:
            while True:
                sample = conn.execute(self.SAMPLE, {"application": self.application}).fetchone()
                assert sample is not None
                xact, wait, waiting, others, checkpoints = sample
                self.samples.append(
                    (
                        time.monotonic(),
                        float(xact or 0),
                        float(wait or 0),
                        waiting,
                        others or [],
                        checkpoints,
                    )
                )
                if self._stop.wait(self.interval):
                    return

    def window(self, start: float, end: float) -> dict:
        inside = [s for s in self.samples if start <= s[0] < end]
        return {
            "samples": len(inside),
            "purge_longest_transaction_ms": max((s[1] for s in inside), default=0) * 1000,
            "purge_in_transaction_share": (
                sum(1 for s in inside if s[1] > 0) / len(inside) if inside else 0
            ),
            "longest_lock_wait_ms": max((s[2] for s in inside), default=0) * 1000,
            "most_backends_waiting": max((s[3] for s in inside), default=0),
            # What the other backends at work (the refunds') were doing when sampled: on a
            # core ("CPU": no wait event), or waiting for what (IO:WALSync, LWLock:...).
            "others_at_work": dict(Counter(w for s in inside for w in s[4]).most_common(6)),
            # Checkpoints begun in the window (pg_stat_bgwriter): each writes out what the
            # writes before it dirtied, and the refunds' commits wait on that I/O.
            "checkpoints": inside[-1][5] - inside[0][5] if inside else 0,
        }
