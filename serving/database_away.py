"""While the database is away (down, restarting, not answering), every page answers 503
with a short page and every /v1/ URL the API's own `database_unavailable` envelope,
never Django's 500; see docs/operating/serving.md.

A view's error reaches process_exception. One raised outside any view (a middleware that
reads the session or the user) becomes Django's 500 first: got_request_exception marks
the request, and the 500 is replaced on the way out."""

from __future__ import annotations

import logging
import sys

from django.core.signals import got_request_exception
from django.dispatch import receiver
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.cache import add_never_cache_headers

from ledger_app.db import connection_lost, drop_broken_connection

log = logging.getLogger("serving.database_away")

RETRY_AFTER_SECONDS = 5
_MARK = "_database_away"


class DatabaseAwayMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, _MARK, False):
            return database_away(request)
        return response

    def process_exception(self, request, exception):
        if connection_lost(exception):  # the connection's errors, not a bad query's
            log.warning("database unavailable: %s", exception)
            return database_away(request)
        return None


@receiver(got_request_exception, dispatch_uid="serving.database_away")
def _mark_away(sender, request=None, **kwargs) -> None:
    """Sent inside Django's handling of an uncaught exception, which is still current."""
    failed = sys.exc_info()[1]
    if request is not None and failed is not None and connection_lost(failed):
        setattr(request, _MARK, True)


def database_away(request) -> HttpResponse:
    """The 503: the API's envelope under /v1/, a short page elsewhere; never cached."""
    drop_broken_connection()  # the next request opens a new connection
    if request.path.startswith("/v1/"):
        response: HttpResponse = JsonResponse(
            {
                "error": {
                    "type": "api_error",
                    "code": "database_unavailable",
                    "message": "The ledger database did not answer. Retry later.",
                }
            },
            status=503,
        )
        # As the API's own 503 says it: a retry is safe on a read or under the same key.
        safe = request.method in ("GET", "HEAD", "OPTIONS")
        keyed = bool(request.headers.get("Idempotency-Key"))
        response["Stripe-Should-Retry"] = "true" if safe or keyed else "false"
    else:
        page = render_to_string(
            "database_away.html", {"request_id": getattr(request, "request_id", "")}
        )
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    add_never_cache_headers(response)
    return response
