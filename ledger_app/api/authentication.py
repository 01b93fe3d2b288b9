"""API key authentication: `Authorization: Bearer sk_...`, or HTTP Basic with the key as
the user name (what `curl -u sk_...:` sends)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from django.conf import settings
from rest_framework import authentication, exceptions, permissions, throttling

from ledger_app.models import ApiKey
from ledger_app.services.api_keys import authenticate_api_key


@dataclass(frozen=True)
class ApiClient:
    """The authenticated caller: a client system, not a Django user."""

    key: ApiKey
    is_authenticated: bool = True

    @property
    def label(self) -> str:
        return f"api_key:{self.key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, credentials = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            secret = credentials.strip()
        elif scheme == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise exceptions.AuthenticationFailed() from None
            secret = decoded.partition(":")[0]
        else:
            raise exceptions.AuthenticationFailed()
        key = authenticate_api_key(secret)
        if key is None:
            raise exceptions.AuthenticationFailed()
        return ApiClient(key), key

    def authenticate_header(self, request):
        return 'Bearer realm="refund-backoffice"'


class ApiKeyPermission(permissions.BasePermission):
    """Any valid key reads; only a read-write key creates."""

    def has_permission(self, request, view):
        client = request.user
        if not isinstance(client, ApiClient):
            raise exceptions.NotAuthenticated()
        return request.method in permissions.SAFE_METHODS or not client.key.read_only


class ApiKeyThrottle(throttling.SimpleRateThrottle):
    """Requests per API key (API_RATE_LIMIT); counted per process in the local cache."""

    scope = "api_key"

    def get_rate(self):
        return settings.API_RATE_LIMIT

    def get_cache_key(self, request, view):
        client = request.user
        ident = client.key.prefix if isinstance(client, ApiClient) else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


from ledger_app.api import schema  # noqa: E402,F401 - registers the scheme with drf-spectacular
