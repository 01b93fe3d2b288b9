"""API key authentication: `Authorization: Bearer sk_...`, or HTTP Basic with the key as
the user name (what curl's `-u` option sends)."""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from django.conf import settings
from rest_framework import authentication, exceptions, permissions, throttling

from ledger_app.access.api_keys import authenticate_api_key
from ledger_app.access.models import ApiKey
from ledger_app.operations.rate_counters import WindowCount, count_in_window
from serving.client_address import client_address, counted_address, network_of
from serving.logs import bind

if TYPE_CHECKING:  # DRF's settings import this module while rest_framework.views loads
    from rest_framework.request import Request
    from rest_framework.views import APIView


@dataclass(frozen=True)
class ApiClient:
    """The authenticated caller: a client system, not a Django user."""

    key: ApiKey
    is_authenticated: bool = True

    @property
    def label(self) -> str:
        return f"api_key:{self.key.prefix}"


log = logging.getLogger("ledger_app.api.authentication")


def client_of(request: Request) -> ApiClient:
    """The caller a view serves: ApiKeyPermission lets no other in."""
    client = request.user
    if not isinstance(client, ApiClient):
        raise exceptions.NotAuthenticated()
    return client


class FailedAuthentications:
    """Wrong or revoked keys per client address (serving/client_address.py, the one
    the admin sign-in lockout and the logs use too; an IPv6 client counted by its network, as
    the lockout counts it: counted_address), in fixed windows of
    API_AUTH_FAILURE_LIMIT's period, counted in the database every process and machine
    shares (services/rate_counters.py). Past the limit a wrong key from that address is
    answered 429 (Stripe's rate_limit) until the window ends. A right key is never held
    back: a 256-bit key cannot be guessed, so what this stops is a flood of wrong ones, and
    a client sharing an address with a broken one keeps working. It costs nothing on the
    way of a good key."""

    def __init__(self, request: Request) -> None:
        rate = FailureRate()
        self.limit, self.period = rate.num_requests, rate.duration
        self.address = client_address(request)
        self.counted = network_of(self.address)

    def refuse(self) -> NoReturn:
        """A wrong key: counted, then 401, or 429 once the address is over the limit (that
        one is not counted). If the counter fails it is a 401: a wrong key is refused
        either way, only the address's flood goes uncounted meanwhile."""
        window = count_in_window(
            key=f"api-auth-failures:{self.counted}", limit=self.limit, period_seconds=self.period
        )
        if not window.within_limit:
            raise exceptions.Throttled(wait=window.seconds_left)
        if self.counted == self.address:
            log.warning("API authentication failed from %s", self.address)
        else:
            log.warning(
                "API authentication failed from %s (counted as %s)", self.address, self.counted
            )
        raise exceptions.AuthenticationFailed()


class FailureRate(throttling.SimpleRateThrottle):
    """API_AUTH_FAILURE_LIMIT as DRF reads a rate: `num_requests` per `duration` seconds."""

    num_requests: int
    duration: int

    def get_rate(self) -> str:
        return settings.API_AUTH_FAILURE_LIMIT


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiClient, ApiKey] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        client = self._client(header)
        if client is None:
            FailedAuthentications(request).refuse()
        bind(api_key_prefix=client.key.prefix)  # the request's later lines name the key
        return client, client.key

    def _client(self, header: str) -> ApiClient | None:
        """The client the Authorization header names, or None for a wrong or revoked key."""
        scheme, _, credentials = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            secret = credentials.strip()
        elif scheme == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode()
            except (binascii.Error, ValueError):  # ValueError: non-ASCII; UnicodeDecodeError too
                return None
            secret = decoded.partition(":")[0]
        else:
            return None
        key = authenticate_api_key(secret)
        return None if key is None else ApiClient(key)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="refund-backoffice"'


class ApiKeyPermission(permissions.BasePermission):
    """Any valid key reads; only a read-write key creates."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        client = request.user
        if not isinstance(client, ApiClient):
            raise exceptions.NotAuthenticated()
        return request.method in permissions.SAFE_METHODS or not client.key.read_only


class ApiKeyThrottle(throttling.SimpleRateThrottle):
    """Requests per API key (API_RATE_LIMIT, e.g. 100/second), in fixed windows counted in
    the database every process and machine shares (services/rate_counters.py), so the
    limit is the same however many web processes serve the key. DRF's interface: a refused
    request gets 429 with Retry-After, the seconds until the window ends. If the counter
    fails the request is served, uncounted (docs/operating/rate-limits.md says why)."""

    scope = "api_key"
    window: WindowCount | None = None
    # What DRF's __init__ reads from the rate (None without one); its stubs leave them out.
    num_requests: int | None
    duration: int | None

    def get_rate(self) -> str:
        return settings.API_RATE_LIMIT

    def get_ident(self, request: Request) -> str:
        # DRF's own reads X-Forwarded-For by its NUM_PROXIES setting, and the whole header
        # when that is unset: a request without a key is counted as the lockout counts it.
        return counted_address(request)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        client = request.user
        ident = client.key.prefix if isinstance(client, ApiClient) else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self.num_requests is None or self.duration is None:  # no rate
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        self.window = count_in_window(
            key=key, limit=self.num_requests, period_seconds=self.duration
        )
        return self.window.within_limit

    def wait(self) -> float | None:
        return None if self.window is None else self.window.seconds_left


from ledger_app.api import schema  # noqa: E402,F401 - registers the scheme with drf-spectacular
