"""Which Stripe API version a request is answered in (ledger_app/api_versions says what
differs): its `Stripe-Version` header, else its key's default. A published version is
answered in its own shape; one named after the newest the server knows is answered as the
newest; anything else is not a version and is refused before anything is read or written.
Every /v1/ answer names the version it was given in, in its own `Stripe-Version` header,
as Stripe's do, and `Stripe-Version-Requested` names the one asked for when it differs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger_app import api_versions
from ledger_app.api.errors import ApiError
from serving.security import API_PREFIX


def requested_version(request: Request) -> str:
    """The version a request is answered in: its Stripe-Version's (api_versions.resolve),
    else its key's default; 400 api_version_invalid for a Stripe-Version that is not one."""
    asked = request.headers.get("Stripe-Version")
    if asked is None:
        key = getattr(request.user, "key", None)
        stored = api_versions.resolve(key.api_version) if key is not None else None
        return stored or api_versions.LATEST
    answered = api_versions.resolve(asked)
    if answered is None:
        raise ApiError(api_versions.unsupported_message(asked), code="api_version_invalid")
    return answered


def version_of(request: Request) -> str:
    """The version this request is answered in (StripeView set it)."""
    return getattr(request, "api_version", api_versions.LATEST)


class StripeView(APIView):
    """An API view answering in the request's Stripe API version: checked once the key
    is (a wrong key is a 401 whatever version it asks for)."""

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        request.api_version = requested_version(request)
        request._request.stripe_api_version = request.api_version

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """The answer's objects in the request's version: rendered in today's shape, then
        reshaped by what changed since (api_versions.shown_in, the one place that does)."""
        version = getattr(request, "api_version", None)
        data = getattr(response, "data", None)
        if version is not None and isinstance(data, dict):
            response.data = api_versions.shown_in(data, version)
        return super().finalize_response(request, response, *args, **kwargs)


class ApiVersionHeaderMiddleware:
    """`Stripe-Version` on every /v1/ answer: the version it was given in; for an answer
    given before the version was known (a 401, a 404 URL), the one asked for if this
    server speaks it, else the newest. A version asked for and answered as another (one
    newer than the server knows) is named in `Stripe-Version-Requested`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX):
            asked = request.headers.get("Stripe-Version")
            used = getattr(request, "stripe_api_version", None)
            answered = api_versions.resolve(asked)
            if used is None:
                used = answered or api_versions.LATEST
            response["Stripe-Version"] = used
            if answered is not None and asked is not None and asked != used:
                response["Stripe-Version-Requested"] = asked
        return response
