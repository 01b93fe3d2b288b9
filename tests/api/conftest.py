import base64
import json

import pytest
import stripe
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from ledger_app import api_versions
from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.approvals.services import reject_refund
from ledger_app.models import ApiKey, Refund, RefundLimit
from tests.factories import LEADS_MIGRATION, migration_group
from tests.services.people import staff


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


@pytest.fixture
def every_refund_status(api, api_key, django_user_model, settings):
    """A refund in each status the ledger has, made through the API (one waiting for
    approval, one rejected), returned by ledger status."""
    made = {}
    for behaviour, status in (
        ("succeed", "succeeded"),
        ("decline", "failed"),
        ("timeout", "unknown"),
        ("pending_then_succeed", "unknown_provider_pending"),
    ):
        charge = _new_charge(api, simulate_refund=behaviour)
        made[status] = _post(api, "/v1/refunds", {"charge": charge["id"], "amount": 100}).json()
    settings.REFUND_DISPATCH = "worker"  # left for the worker to send: pending
    charge = _new_charge(api)
    made["pending"] = _post(api, "/v1/refunds", {"charge": charge["id"], "amount": 100}).json()
    settings.REFUND_DISPATCH = "inline"
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=500, per_day=500)
    charge = _new_charge(api)
    made["awaiting_approval"] = _post(
        api, "/v1/refunds", {"charge": charge["id"], "amount": 1_000}
    ).json()
    rejected = _post(api, "/v1/refunds", {"charge": charge["id"], "amount": 2_000}).json()
    lead = staff(django_user_model, "conformance-lead", migration_group(LEADS_MIGRATION))
    reject_refund(refund_id=rejected["id"], approver=lead, note="not ours")
    made["canceled"] = api.get(f"/v1/refunds/{rejected['id']}").json()
    stored = dict(
        Refund.objects.filter(pk__in=[r["id"] for r in made.values()]).values_list("id", "status")
    )
    assert {stored[r["id"]] for r in made.values()} == set(made) - {"unknown_provider_pending"}
    return made


def _post(api, path: str, body: dict):
    return api.post(path, json.dumps(body), content_type="application/json")


def _new_charge(api, **metadata) -> dict:
    return _post(
        api, "/v1/charges", {"amount": 10_000, "currency": "usd", "metadata": metadata}
    ).json()
