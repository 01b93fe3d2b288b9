"""/v1/webhook_endpoints under the access matrix's rules, with a real endpoint in the path:
no valid key is 401 for every method; a read-only key reads and writes nothing (403)."""

import pytest

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import WebhookEndpoint
from tests.api_routes import api_endpoints, send

pytestmark = pytest.mark.django_db


def webhook_routes(endpoint: WebhookEndpoint) -> list[tuple[str, list[str]]]:
    routes = [
        (route.replace("<str:endpoint_id>", endpoint.pk), methods)
        for route, methods in api_endpoints()
        if route.startswith("/v1/webhook_endpoints")
    ]
    assert [route for route, _ in routes] == [
        "/v1/webhook_endpoints",
        f"/v1/webhook_endpoints/{endpoint.pk}",
    ]
    return routes


@pytest.mark.parametrize("header", [None, "Bearer sk_live_" + "0" * 40])
def test_no_valid_key_is_401_everywhere(client, endpoint, header):
    headers = {"HTTP_AUTHORIZATION": header} if header else {}

    for route, methods in webhook_routes(endpoint):
        for method in methods:
            response = send(client, method, route, **headers)
            assert response.status_code == 401, (method, route)

    assert WebhookEndpoint.objects.get().deleted_at is None


def test_a_read_only_key_reads_and_writes_nothing(client, endpoint):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {create_api_key(name='ro', read_only=True)[1]}"}
    writes = []

    for route, methods in webhook_routes(endpoint):
        assert send(client, "get", route, **headers).status_code == 200, route
        writes += [send(client, m, route, **headers).status_code for m in methods if m != "get"]

    assert writes == [403, 403, 403]  # create, update, delete
    assert WebhookEndpoint.objects.get().status == "enabled"
