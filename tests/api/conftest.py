import base64

import pytest
import stripe
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from ledger_app import api_versions
from ledger_app.services.api_keys import create_api_key


@pytest.fixture
def api_key(db):
    return create_api_key(name="test client")[1]


@pytest.fixture
def read_only_key(db):
    return create_api_key(name="reporting", read_only=True)[1]


@pytest.fixture
def api(client, api_key):
    """Django's test client speaking to /v1/ with a read-write key."""
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {api_key}"
    return client


@pytest.fixture
def stripe_client(live_server, api_key):
    """The official stripe package pointed at the running server."""
    return stripe.StripeClient(
        api_key, base_addresses={"api": live_server.url}, max_network_retries=0
    )


@pytest.fixture
def legacy_client(live_server, api_key):
    """The official stripe package pinned to the oldest API version served, whose
    charges embed their refunds."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": live_server.url},
        max_network_retries=0,
        stripe_version=api_versions.LEGACY,
    )


def basic_auth(secret: str) -> str:
    return "Basic " + base64.b64encode(f"{secret}:".encode()).decode()


@pytest.fixture
def wsgi_in_test_transaction(db, settings):
    """Let the real WSGI handler run inside the test's transaction.

    A WSGI request fires request_started/request_finished, whose close_old_connections
    would close the connection holding the test transaction (Django's test client
    disconnects it the same way). No provider latency, and no throttling to hit.
    """
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    settings.REFUND_DISPATCH = "inline"
    settings.API_RATE_LIMIT = "100000/second"
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def auth(api_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}
