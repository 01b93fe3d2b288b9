"""Every API error in Stripe's envelope: {"error": {"type", "code", "message", "param"}}."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.response import Response

from ledger_app import errors
from ledger_app.db import connection_lost, drop_broken_connection

if TYPE_CHECKING:
    from ledger_app.charges.models import Charge

log = logging.getLogger("ledger_app.api")

INVALID_REQUEST = "invalid_request_error"

# Domain codes whose API code differs: Stripe's name for the case where it has one. A
# parameter with a bad value, where Stripe has no code of its own, is our one
# `parameter_invalid` with `param` naming it (Stripe sends the param and no code). The
# domain keeps its finer codes for the admin and the commands. docs/api.md, "Error codes".
API_CODES = {
    "invalid_amount": "parameter_invalid_integer",
    "note_required": "parameter_missing",
    **dict.fromkeys(
        (
            "invalid_charge_status",
            "invalid_created",
            "invalid_currency",
            "invalid_customer",
            "invalid_description",
            "invalid_enabled_events",
            "invalid_metadata",
            "invalid_note",
            "invalid_payment_intent",
            "invalid_reason",
        ),
        "parameter_invalid",
    ),
}
STATUS_FOR = {"idempotency_key_in_use": 409, "lock_timeout": 409}
TYPE_FOR = {
    "idempotency_key_reused": "idempotency_error",
    "idempotency_key_in_use": "idempotency_error",
}


class ApiError(Exception):
    """A refusal decided by the API layer itself (parsing, parameters, routing)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        status: int = 400,
        type: str = INVALID_REQUEST,  # Stripe's field name
    ) -> None:
        super().__init__(message)
        self.message, self.code, self.param, self.status, self.type = (
            message,
            code,
            param,
            status,
            type,
        )


def body(*, type: str, code: str | None, message: str, param: str | None = None) -> dict:
    error = {"type": type, "code": code, "message": message}
    if param:
        error["param"] = param
    return {"error": error}


def ledger_error_response(exc: errors.LedgerError, *, path_param: str | None = None) -> Response:
    """A domain refusal. An unknown id named in the path is a 404; in the body, a 400."""
    status = STATUS_FOR.get(exc.code, 400)
    param = exc.param
    if isinstance(exc, errors.ResourceMissing) and path_param is not None:
        status, param = 404, None
    response = Response(
        body(
            type=TYPE_FOR.get(exc.code, INVALID_REQUEST),
            code=API_CODES.get(exc.code, exc.code),
            message=exc.message,
            param=param,
        ),
        status=status,
    )
    if status == 409:
        response["Stripe-Should-Retry"] = "true"
    return response


# A card error's `code` where Stripe's is not `card_declined`: these decline codes are
# codes of their own.
CARD_ERROR_CODES = {
    "expired_card": "expired_card",
    "incorrect_cvc": "incorrect_cvc",
    "processing_error": "processing_error",
}


def card_error_response(charge: Charge) -> Response:
    """Stripe's answer to a declined charge: 402 `card_error`, naming the charge (which
    stays retrievable, `status: failed`), `card_declined` with the provider's decline code
    when it gave one that reads as a code (`generic_decline` otherwise)."""
    from ledger_app.rendering.charges import FAILURE_CODE

    detail = charge.status_detail
    decline = detail if FAILURE_CODE.match(detail) else "generic_decline"
    error = body(
        type="card_error",
        code=CARD_ERROR_CODES.get(decline, "card_declined"),
        message=f"Your card was declined. The charge {charge.pk} failed.",
    )["error"]
    error["decline_code"] = decline
    error["charge"] = charge.pk
    return Response({"error": error}, status=402)


# DRF's own refusals, the first class that matches: (class, status, type, code, message).
# `{detail}` in a message is DRF's own detail.
DRF_ERRORS: list[tuple[type[drf.APIException], int, str, str, str]] = [
    (
        drf.NotAuthenticated,
        401,
        INVALID_REQUEST,
        "api_key_missing",
        "You did not provide an API key. Send it as 'Authorization: Bearer sk_...' "
        "or as the user name of HTTP Basic authentication.",
    ),
    (
        drf.AuthenticationFailed,
        401,
        INVALID_REQUEST,
        "api_key_invalid",
        "Invalid or revoked API key provided.",
    ),
    (
        drf.PermissionDenied,
        403,
        INVALID_REQUEST,
        "api_key_read_only",
        "This API key is read-only; it can read but not create, change or delete anything.",
    ),
    (
        drf.Throttled,
        429,
        INVALID_REQUEST,  # Stripe's type for a 429; its error types have no rate-limit type
        "rate_limit",
        "Too many requests hit the API too quickly. Retry after a short pause.",
    ),
    (drf.MethodNotAllowed, 405, INVALID_REQUEST, "method_not_allowed", "{detail}"),
    (
        drf.UnsupportedMediaType,
        415,
        INVALID_REQUEST,
        "content_type_unsupported",
        "Send application/x-www-form-urlencoded or application/json.",
    ),
    (
        drf.ParseError,
        400,
        INVALID_REQUEST,
        "body_invalid",
        "The request body could not be parsed: {detail}",
    ),
    (drf.NotFound, 404, INVALID_REQUEST, "resource_missing", "Unrecognized request URL."),
]
# Django's refusals of the request itself, before any view: (class, status, code, message).
DJANGO_ERRORS = [
    (RequestDataTooBig, 413, "body_too_large", "The request body is too large."),
    (TooManyFieldsSent, 400, "too_many_parameters", "Too many parameters."),
    (SuspiciousOperation, 400, "request_invalid", "The request was refused."),
]


def bad_request(request: HttpRequest, exception: Exception) -> Any:
    """Django's own 400, for a request refused before any view (a `Host` not in
    ALLOWED_HOSTS, say): Stripe's envelope on the API's paths, Django's page elsewhere."""
    if not request.path.startswith("/v1/"):
        from django.views.defaults import bad_request as page

        return page(request, exception)
    message = "The request was refused."
    if isinstance(exception, DisallowedHost):
        message = "The request's Host header names no host this server answers to."
    answer = body(type=INVALID_REQUEST, code="request_invalid", message=message)
    return JsonResponse(answer, status=400)


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's exception handler for the whole API: nothing leaves without the envelope."""
    if isinstance(exc, ApiError):
        return Response(
            body(type=exc.type, code=exc.code, message=exc.message, param=exc.param),
            status=exc.status,
        )
    if isinstance(exc, errors.LedgerError):
        view = context.get("view")
        return ledger_error_response(exc, path_param=getattr(view, "path_param", None))
    if isinstance(exc, drf.ValidationError):
        return parameter_error_response(exc)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    for cls, status, code, message in DJANGO_ERRORS:
        if isinstance(exc, cls):
            return Response(body(type=INVALID_REQUEST, code=code, message=message), status=status)
    if isinstance(exc, drf.APIException):
        return _drf_error_response(exc)
    if connection_lost(exc):
        return _database_unavailable(context)
    log.exception("unexpected error in the API")
    return Response(
        body(type="api_error", code="internal_error", message="An unexpected error occurred."),
        status=500,
    )


def parameter_error_response(exc: drf.ValidationError) -> Response:
    """A parameter an endpoint's serializer refused (params.py): the first problem, with
    the code and message its field gave and the parameter's name as `param`. (Rules
    across parameters raise an ApiError instead, so every key here names a parameter.)"""
    param: str | None = None
    problems: Any = exc.detail
    if isinstance(problems, dict):
        param, problems = next(iter(problems.items()))
    problem = problems[0] if isinstance(problems, list) else problems
    return Response(
        body(type=INVALID_REQUEST, code=problem.code, message=str(problem), param=param),
        status=400,
    )


def _drf_error_response(exc: drf.APIException) -> Response:
    status, type_, code, message = exc.status_code, INVALID_REQUEST, "invalid_request", "{detail}"
    for known in DRF_ERRORS:
        if isinstance(exc, known[0]):
            _, status, type_, code, message = known
            break
    response = Response(
        body(type=type_, code=code, message=message.format(detail=exc.detail)), status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="refund-backoffice"'
    wait = getattr(exc, "wait", None)
    if status == 429 and wait:
        response["Retry-After"] = str(max(1, int(wait)))
    return response


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Any /v1/ URL that matches no endpoint, with any method and with or without a key:
    no URL exists for some callers only. Exempt from CSRF like every API view: clients
    authenticate with keys, not cookies, so a POST here is a 404 envelope, not Django's
    HTML 403 page."""
    return JsonResponse(
        body(
            type=INVALID_REQUEST,
            code="resource_missing",
            message=f"Unrecognized request URL ({request.method}: {request.path}).",
        ),
        status=404,
    )


def _database_unavailable(context: dict) -> Response:
    """The connection dropped or the server went away mid-request (not a bug in a query:
    those stay 500). Whether a write committed is not known here. With an Idempotency-Key
    a retry finds out and can never make a second refund or charge; without one it could,
    so the client is told to look before it retries."""
    log.exception("database unavailable during an API request")
    drop_broken_connection()
    request = context.get("request")
    safe = request is None or request.method in ("GET", "HEAD", "OPTIONS")
    keyed = request is not None and bool(request.headers.get("Idempotency-Key"))
    if safe or keyed:
        message = "The ledger database did not answer. Retry"
        message += " with the same Idempotency-Key: it returns the outcome." if keyed else "."
    else:
        message = (
            "The ledger database did not answer and this request had no Idempotency-Key, so "
            "it may or may not have been carried out. List the charge's refunds (or your "
            "charges) before sending it again."
        )
    response = Response(
        body(type="api_error", code="database_unavailable", message=message), status=503
    )
    response["Stripe-Should-Retry"] = "true" if safe or keyed else "false"
    if safe or keyed:
        response["Retry-After"] = "1"
    return response
