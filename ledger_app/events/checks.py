"""Webhook endpoints past WEBHOOK_ENDPOINTS_TOTAL: made before the limits existed, or left
over when the setting was lowered. Each event is sent to the oldest WEBHOOK_ENDPOINTS_TOTAL
enabled endpoints only (selectors.live_endpoints); the others get nothing, and this says
so: `check --deploy` warns (ledger_app.W260), and each process logs a WARNING once, after
the first event it records that went to as many endpoints as the limit allows (no query
at import, and it tells web and worker processes alike)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core import checks
from django.db import DatabaseError, transaction

from ledger_app.events.selectors import enabled_endpoints_past_the_limit

log = logging.getLogger("ledger_app.webhooks")

CHECK_ID = "ledger_app.W260"

_checked = False  # this process has counted (and warned, if it had to)


def past_the_limit_message(past: int) -> str:
    total = settings.WEBHOOK_ENDPOINTS_TOTAL
    return (
        f"{past} enabled webhook endpoints are past WEBHOOK_ENDPOINTS_TOTAL ({total}) and "
        f"get no events: every event goes to the oldest {total} only"
    )


@checks.register(checks.Tags.database, deploy=True)
def check_endpoints_past_the_limit(
    app_configs: object = None, **kwargs: object
) -> list[checks.CheckMessage]:
    try:
        past = enabled_endpoints_past_the_limit()
    except DatabaseError:
        return []  # no database to count in (yet): nothing to say about its endpoints
    if not past:
        return []
    return [
        checks.Warning(
            past_the_limit_message(past) + ".",
            hint="Delete the endpoints no longer used (DELETE /v1/webhook_endpoints/{id}), "
            "or raise WEBHOOK_ENDPOINTS_TOTAL (docs/api.md, Webhook endpoints).",
            id=CHECK_ID,
        )
    ]


def note_full_fan_out() -> None:
    """An event is being written for WEBHOOK_ENDPOINTS_TOTAL endpoints, the most: once
    this process, after the change commits (never inside its locks), count the enabled
    endpoints left out and log a WARNING if there are any."""
    if not _checked:
        transaction.on_commit(_warn_if_past_the_limit, robust=True)


def _warn_if_past_the_limit() -> None:
    global _checked
    if _checked:
        return
    try:
        past = enabled_endpoints_past_the_limit()
    except DatabaseError:
        return  # counted again after a later event
    _checked = True
    if past:
        log.warning(
            "%s; delete the endpoints no longer used or raise the setting (%s)",
            past_the_limit_message(past),
            CHECK_ID,
        )
