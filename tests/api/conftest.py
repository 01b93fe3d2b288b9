import base64

import pytest
import stripe

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


def basic_auth(secret: str) -> str:
    return "Basic " + base64.b64encode(f"{secret}:".encode()).decode()
