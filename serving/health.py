"""Probes for load balancers and orchestrators: /healthz (this process answers) and /readyz
(it can serve: the database answers and every migration this code knows is applied).

Both are plain Django views outside the admin and the API, so no sign-in, second factor or
API key applies, and neither reaches the payment provider. See docs/operating/health-and-logs.md.
"""

from __future__ import annotations

import functools
import logging
import threading

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from ledger_app.db import drop_broken_connection

log = logging.getLogger("serving.health")

OK = "ok"
NOT_CHECKED = "not checked"  # an earlier check failed; this one could not say


def _probe_answer(body: dict, status: int) -> JsonResponse:
    response = JsonResponse(body, status=status)
    # A cached "ok" would hide an outage: no proxy or client may keep one.
    add_never_cache_headers(response)
    # Readiness says why it fails in its own log line (ReadinessLog); Django's generic
    # "Service Unavailable: /readyz" once per probe would only repeat it.
    response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own flag
    return response


@require_safe
def healthz(request):
    """The process is up and serving requests; says nothing of the database on purpose, so
    an orchestrator does not restart every web process while the database is away."""
    return _probe_answer({"status": OK}, 200)


@require_safe
def readyz(request):
    """200 when this process can serve: the database answers and has every migration this
    code knows; 503 naming the check that failed otherwise."""
    checks = readiness_checks()
    ready = is_ready(checks)
    _readiness_log.record(ready, checks)
    body = {"status": OK if ready else "unavailable", "checks": checks}
    return _probe_answer(body, 200 if ready else 503)


def readiness_checks() -> dict[str, str]:
    """What /readyz reports, check by check: OK, or why not. /metrics reports the same
    (ledger_app/metrics/readiness.py), for a Prometheus that cannot probe /readyz itself."""
    checks = {"database": _database(), "migrations": NOT_CHECKED}
    if checks["database"] == OK:
        checks["migrations"] = _migrations()
    return checks


def is_ready(checks: dict[str, str]) -> bool:
    return all(value == OK for value in checks.values())


def _database() -> str:
    """OK when a query answers. Behind a transaction pooler the session's lock_timeout is
    the server's (settings.py, DATABASE_TRANSACTION_POOLER): a server that does not set it
    to DATABASE_LOCK_TIMEOUT_MS would let requests queue on a lock for ever, so it is
    checked here, where a deploy that forgot it is stopped before it serves."""
    pooled = connection.vendor == "postgresql" and settings.DATABASE_TRANSACTION_POOLER
    try:
        with connection.cursor() as cursor:
            if pooled:
                cursor.execute("SELECT setting FROM pg_settings WHERE name = 'lock_timeout'")
            else:
                cursor.execute("SELECT 1")
            (answer,) = cursor.fetchone()
    except DatabaseError as exc:
        log.debug("readiness: database query failed: %s", exc)
        drop_broken_connection()  # the next probe reconnects instead of reusing a dead one
        return "unavailable"
    if pooled and str(answer) != str(settings.DATABASE_LOCK_TIMEOUT_MS):
        return (
            f"lock_timeout is {answer}ms on the server, "
            f"not DATABASE_LOCK_TIMEOUT_MS ({settings.DATABASE_LOCK_TIMEOUT_MS}ms)"
        )
    return OK


@functools.cache
def _known_migrations() -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """Every migration on disk (squashed ones with what they replace), read once per
    process: the files cannot change under a running process, and reading them imports
    every migration module, far too slow to repeat per probe."""
    nodes = MigrationLoader(None, ignore_no_migrations=True).graph.nodes
    return {key: tuple(migration.replaces or ()) for key, migration in nodes.items()}


def _migrations() -> str:
    """The recorded migrations compared with the known ones: two small queries, no graph."""
    try:
        recorder = MigrationRecorder(connection)
        # Asked first, so a database never migrated answers without a failing query
        # (PostgreSQL would log an error for every probe).
        applied = set(recorder.applied_migrations()) if recorder.has_table() else set()
    except DatabaseError:
        drop_broken_connection()
        return "unavailable"
    missing = [
        key
        for key, replaces in _known_migrations().items()
        if key not in applied and not (replaces and applied.issuperset(replaces))
    ]
    return OK if not missing else f"{len(missing)} not applied"


class ReadinessLog:
    """One line when this process stops being ready (naming the failed check) and one when
    it is ready again, not one per probe: probes come every few seconds from every load
    balancer, and an outage should not bury the other log lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: bool | None = None  # not probed yet

    def record(self, ready: bool, checks: dict[str, str]) -> None:
        with self._lock:
            changed, self._ready = self._ready != ready, ready
        if not changed:
            return
        failed = ", ".join(
            f"{name} {value}" for name, value in checks.items() if value not in (OK, NOT_CHECKED)
        )
        if ready:
            log.info("ready: the database answers and every migration is applied")
        else:
            log.warning("not ready: %s", failed)


_readiness_log = ReadinessLog()
