"""Prometheus metrics: the counters and histograms this process adds to (this module), the
figures read from the database at scrape time (`database`), and GET /metrics (`views`).

Counters live in each process. Under gunicorn's several workers, PROMETHEUS_MULTIPROC_DIR
makes prometheus_client keep them in files there that /metrics adds up (docs/operating/
metrics.md); it must be set before the first metric is made, i.e. in the environment.
"""

from __future__ import annotations

import os

from prometheus_client import Counter, Histogram

from ledger_app.charges.models import MovementStatus
from ledger_app.refunds.models import Refund

# prometheus_client opens its files there as each metric is made and fails on a missing
# directory; every command would then die on start (gunicorn's on_starting makes it too).
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# What create_refund can hand back for a new refund: sent and answered, sent and not
# answered (unknown), left for the worker or the send pool (pending), or held for approval.
CREATED_OUTCOMES = (
    MovementStatus.PENDING,
    MovementStatus.SUCCEEDED,
    MovementStatus.FAILED,
    MovementStatus.UNKNOWN,
    MovementStatus.AWAITING_APPROVAL,
)
PROVIDER_OPERATIONS = ("refund", "lookup_refund", "charge", "lookup_charge", "list")
# The gateway wrapper's names for what went wrong (ledger_app/provider/gateways/instrumented.py).
PROVIDER_ERRORS = ("timeout", "unavailable", "key_conflict", "outcome_unknown", "unexpected")
# Seconds. The provider is normally answered in well under a second; GATEWAY_TIMEOUT_SECONDS
# (10 by default) is where a call gives up, so the top buckets show calls running into it.
PROVIDER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

REFUNDS_CREATED = Counter(
    "ledger_refunds_created",
    "New refunds returned by create_refund (replays not counted), by source and by the "
    "status it returned them in.",
    ["source", "outcome"],
)
PROVIDER_CALL_SECONDS = Histogram(
    "ledger_provider_call_duration_seconds",
    "Time each call to the payment provider took, answered or not.",
    ["operation"],
    buckets=PROVIDER_BUCKETS,
)
PROVIDER_CALL_ERRORS = Counter(
    "ledger_provider_call_errors",
    "Provider calls that raised instead of answering (a decline is an answer, not an error).",
    ["operation", "error"],
)
API_RESPONSES = Counter(
    "ledger_api_responses",
    "Responses under /v1/, by HTTP status and URL name.",
    ["status", "view"],
)

# Every series a dashboard or alert names exists from the start at 0, so rate() and
# absent() see a process that has done nothing yet instead of no series at all.
for _source in Refund.Source.values:
    for _outcome in CREATED_OUTCOMES:
        REFUNDS_CREATED.labels(source=_source, outcome=_outcome)
for _operation in PROVIDER_OPERATIONS:
    PROVIDER_CALL_SECONDS.labels(operation=_operation)
    for _error in PROVIDER_ERRORS:
        PROVIDER_CALL_ERRORS.labels(operation=_operation, error=_error)


def count_refund_created(refund: Refund) -> None:
    REFUNDS_CREATED.labels(source=refund.source, outcome=refund.status).inc()


def observe_provider_call(operation: str, seconds: float, error: str | None) -> None:
    PROVIDER_CALL_SECONDS.labels(operation=operation).observe(seconds)
    if error is not None:
        PROVIDER_CALL_ERRORS.labels(operation=operation, error=error).inc()


def count_api_response(status: str, view: str) -> None:
    """`status` and `view` from a closed set (middleware.status_label, view_label)."""
    API_RESPONSES.labels(status=status, view=view).inc()


# The deploy check that /metrics is not left open (registered on import, as Django loads
# the app: the admin's modules import this package).
from ledger_app.metrics import checks as _checks  # noqa: E402, F401
