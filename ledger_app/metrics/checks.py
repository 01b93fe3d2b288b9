"""`check --deploy`: production with /metrics open to anyone who reaches it."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=True)
def check_metrics_token(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if settings.METRICS_TOKEN:
        return []
    return [
        checks.Warning(
            "METRICS_TOKEN is not set: GET /metrics answers anyone who can reach the server.",
            hint="Set METRICS_TOKEN to a long random string and give it to the scraper "
            "(docs/operating/metrics.md).",
            id="ledger_app.W250",
        )
    ]
