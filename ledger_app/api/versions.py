"""Which Stripe API version a request is answered in (ledger_app/api_versions.py says what
differs): its `Stripe-Version` header, else its key's default. A version the back office
does not speak is refused before anything is read or written. Every /v1/ answer names the
version it was given in, in its own `Stripe-Version` header, as Stripe's do."""

from __future__ import annotations

from rest_framework.views import APIView

from backoffice.security import API_PREFIX
from ledger_app import api_versions
from ledger_app.api.errors import ApiError


def requested_version(request) -> str:
    """The version a request asks for: its Stripe-Version, else its key's default; 400
    api_version_invalid for one not in api_versions.SUPPORTED."""
    asked = request.headers.get("Stripe-Version")
    if asked is None:
        key = getattr(request.user, "key", None)
        return key.api_version if key is not None else api_versions.LATEST
    if not api_versions.is_supported(asked):
        raise ApiError(api_versions.unsupported_message(asked), code="api_version_invalid")
    return asked


def version_of(request) -> str:
    """The version this request is answered in (StripeView set it)."""
    return getattr(request, "api_version", api_versions.LATEST)


class StripeView(APIView):
    """An API view answering in the request's Stripe API version: checked once the key
    is (a wrong key is a 401 whatever version it asks for)."""

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        request.api_version = requested_version(request)
        request._request.stripe_api_version = request.api_version


class ApiVersionHeaderMiddleware:
    """`Stripe-Version` on every /v1/ answer: the version it was given in; for an answer
    given before the version was known (a 401, a 404 URL), the one asked for if this
    server speaks it, else the newest."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX):
            asked = request.headers.get("Stripe-Version")
            used = getattr(request, "stripe_api_version", None)
            if used is None:
                used = asked if api_versions.is_supported(asked) else api_versions.LATEST
            response["Stripe-Version"] = used
        return response
