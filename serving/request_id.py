"""A Request-Id on every response and on every log line written while serving it."""

from __future__ import annotations

import contextvars
import logging
import secrets

from django.http import JsonResponse
from django.views.defaults import server_error as html_server_error

from serving import logs
from serving.client_address import client_address

current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
# The request being served right now, "" outside one: what events name as their cause.
serving_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("serving", default="")
# The Idempotency-Key of each refund the request being served created, by refund id (None
# outside a request): the refund's later events in the same request (its settle, inline or
# in the send pool, which runs in a copy of the request's context) name that key too.
serving_keys: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "serving_keys", default=None
)


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = new_request_id()
        # Left set after the response: Django logs the request's outcome after the
        # middleware chain has returned, and that line should carry the id too. So is
        # what the request concerns (its API key, its staff member): forgotten here, when
        # this thread's next request starts.
        current_request_id.set(request.request_id)
        logs.start_request()
        logs.bind(client_address=client_address(request))
        serving = serving_request_id.set(request.request_id)
        keys = serving_keys.set({})
        try:
            response = self.get_response(request)
        finally:
            serving_keys.reset(keys)
            serving_request_id.reset(serving)
        response["Request-Id"] = request.request_id
        return response


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get()
        return True


def server_error(request, *args, **kwargs):
    """A 500 never shows a traceback; API clients get Stripe's envelope."""
    if request.path.startswith("/v1/"):
        return JsonResponse(
            {
                "error": {
                    "type": "api_error",
                    "code": "internal_error",
                    "message": "An unexpected error occurred.",
                }
            },
            status=500,
        )
    return html_server_error(request, *args, **kwargs)
