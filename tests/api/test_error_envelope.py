"""Every /v1/ answer that is not a success is Stripe's JSON envelope, whatever the method,
path, credentials or body: never Django's HTML pages (the CSRF 403, a 405 page) and never
a 500. And a JSON body nested deep enough to exhaust Python's recursion is a plain 400."""

from __future__ import annotations

import logging

import pytest
from django.conf import settings
from django.test import Client

from ledger_app.api.parsing import MAX_JSON_DEPTH
from ledger_app.models import Charge, Refund
from tests.factories import ChargeFactory
from tests.invariants import rows_written

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

# Paths that name no endpoint: 404 resource_missing for every method.
UNKNOWN_PATHS = [
    "/v1",
    "/v1/",
    "/v1/nope",
    "/v1/refunds/re_x/cancel/now",
    "/v1/refunds/re_x/expire",
    "/v1/charges/ch_x/extra",
    "/v1/charges/",
    "/v1/refunds/re_x/",
    "/v1/charges/ch_x/refunds/re_x",
    "/v1/events/",
    "/v1/balance_transactions/",
    "/v1/payouts/po_x/cancel",
    "/v1/a%0Ab",
    "/v1/%00",
    "/v1/%FF",
]

# Endpoints and the methods they serve; every other method is a 405 method_not_allowed.
# (OPTIONS on an API endpoint answers DRF's JSON description of it, not an error.)
KNOWN_PATHS = {
    "/v1/charges": {"GET", "HEAD", "POST", "OPTIONS"},
    "/v1/charges/ch_x": {"GET", "HEAD", "OPTIONS"},
    "/v1/charges/ch_x/refunds": {"GET", "HEAD", "POST", "OPTIONS"},
    "/v1/refunds": {"GET", "HEAD", "POST", "OPTIONS"},
    "/v1/refunds/re_x": {"GET", "HEAD", "POST", "OPTIONS"},
    "/v1/refunds/re_x/cancel": {"POST", "OPTIONS"},
    "/v1/payment_intents/pi_x": {"GET", "HEAD", "OPTIONS"},
    "/v1/events": {"GET", "HEAD", "OPTIONS"},
    "/v1/events/evt_x": {"GET", "HEAD", "OPTIONS"},
    "/v1/balance_transactions": {"GET", "HEAD", "OPTIONS"},
    "/v1/balance_transactions/txn_x": {"GET", "HEAD", "OPTIONS"},
    "/v1/payouts": {"GET", "HEAD", "OPTIONS"},
    "/v1/payouts/po_x": {"GET", "HEAD", "OPTIONS"},
    "/v1/openapi.json": {"GET", "HEAD"},
    "/v1/docs": {"GET", "HEAD"},
}
NEEDS_NO_KEY = {"/v1/openapi.json", "/v1/docs"}


@pytest.fixture
def csrf_client() -> Client:
    """A client that enforces CSRF like a browser-facing deployment does."""
    return Client(enforce_csrf_checks=True)


def assert_envelope(response, method: str, path: str) -> dict | None:
    where = (method, path, response.status_code, response.content[:200])
    assert response.status_code < 500, where
    assert response["Content-Type"].split(";")[0] == "application/json", where
    if method == "HEAD":  # no body, but the same status and type as GET
        return None
    error = response.json()["error"]
    assert isinstance(error, dict), where
    assert {"type", "code", "message"} <= set(error), where
    assert all(isinstance(error[k], str) and error[k] for k in ("type", "code", "message"))
    return error


def send(client: Client, method: str, path: str, **headers):
    # A body with every method that may carry one, as a client sending a form would.
    body = "amount=100&currency=usd" if method in ("POST", "PUT", "PATCH", "DELETE") else ""
    return client.generic(
        method, path, body, content_type="application/x-www-form-urlencoded", **headers
    )


@pytest.mark.parametrize("credential", ["key", "no key", "wrong key"])
def test_unknown_paths_are_a_json_404_for_every_method(csrf_client, api_key, credential):
    """An unknown URL is unknown to everyone: 404, with or without a key (the list of URLs
    is public in /v1/openapi.json, so a 401 would hide nothing)."""
    header = {
        "key": f"Bearer {api_key}",
        "no key": None,
        "wrong key": "Bearer sk_live_" + "0" * 40,
    }[credential]
    headers = {"HTTP_AUTHORIZATION": header} if header else {}
    checked = 0

    for path in UNKNOWN_PATHS:
        for method in METHODS:
            response = send(csrf_client, method, path, **headers)

            error = assert_envelope(response, method, path)
            assert response.status_code == 404, (method, path, response.status_code)
            if error is not None:
                assert error["code"] == "resource_missing"
                assert error["type"] == "invalid_request_error"
                assert error["message"].startswith(f"Unrecognized request URL ({method}: ")
            checked += 1

    assert checked == len(UNKNOWN_PATHS) * len(METHODS)
    assert Refund.objects.count() == Charge.objects.count() == 0


def test_known_paths_answer_unsupported_methods_with_a_json_405(csrf_client, api_key):
    ChargeFactory(amount=1_000)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}
    refused = 0

    for path, served in KNOWN_PATHS.items():
        for method in METHODS:
            response = send(csrf_client, method, path, **headers)
            if method in served:
                assert response.status_code < 500, (method, path, response.content[:200])
                continue
            error = assert_envelope(response, method, path)
            assert response.status_code == 405, (method, path, response.status_code)
            assert error is None or error["code"] == "method_not_allowed"  # None: HEAD
            assert set(response["Allow"].replace(" ", "").split(",")) == served, path
            refused += 1

    assert refused == sum(len(set(METHODS) - served) for served in KNOWN_PATHS.values())
    assert Refund.objects.count() == 0  # (the POST to /v1/charges made a charge)


def test_known_endpoints_without_a_key_answer_401_in_the_envelope(csrf_client):
    for path in set(KNOWN_PATHS) - NEEDS_NO_KEY:
        for method in METHODS:
            response = send(csrf_client, method, path)

            error = assert_envelope(response, method, path)
            assert response.status_code == 401, (method, path, response.status_code)
            if error is not None:
                assert error["code"] == "api_key_missing"


@pytest.mark.parametrize("path", ["/v1/openapi.json", "/v1/docs"])
def test_the_schema_and_docs_pages_still_serve_get_and_head(client, path):
    for method in ("GET", "HEAD"):
        response = client.generic(method, path)

        assert response.status_code == 200, (method, path)
    kind = client.get(path)["Content-Type"]
    assert kind.startswith("text/html" if path == "/v1/docs" else "application/vnd.oai.openapi")


# --- deeply nested JSON bodies -----------------------------------------------------------

DEPTHS = [MAX_JSON_DEPTH + 1, 50, 320, 400, 475, 1000, 100_000]


def nested_objects(depth: int) -> str:
    return '{"metadata": ' * depth + "1" + "}" * depth


def nested_arrays(depth: int, *, closed: bool) -> str:
    return "[" * depth + ("]" * depth if closed else "")


def with_metadata_value(path: str, charge_id: str, value: str) -> str:
    """A valid request to `path` but for its metadata value, given as JSON text."""
    fields = f'"charge": "{charge_id}"' if path == "/v1/refunds" else '"currency": "usd"'
    return f'{{{fields}, "amount": 100, "metadata": {{"a": {value}}}}}'


def bodies(path: str, charge_id: str) -> list[tuple[str, str]]:
    found = []
    for depth in DEPTHS:
        arrays = nested_arrays(depth, closed=True)
        found += [
            (f"objects x{depth}", nested_objects(depth)),
            (f"arrays x{depth}", arrays),
            (f"unclosed arrays x{depth}", nested_arrays(depth, closed=False)),
            (f"metadata x{depth}", with_metadata_value(path, charge_id, arrays)),
        ]
    return found


@pytest.mark.parametrize("path", ["/v1/refunds", "/v1/charges"])
def test_deeply_nested_json_is_a_400_and_writes_nothing(api, path, caplog):
    charge = ChargeFactory(amount=10_000)
    before = rows_written()
    caplog.set_level(logging.INFO)
    too_deep = f"The request body could not be parsed: nested more than {MAX_JSON_DEPTH} levels"
    wrong = []

    for name, body in bodies(path, charge.pk):
        response = api.post(
            path, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=f"deep-{name}"
        )

        error = response.json()["error"]
        answer: tuple[object, ...] = (response.status_code, error["code"])
        if len(body.encode()) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            expected = (413, "body_too_large")
        else:
            expected = (400, "body_invalid")
            # Unclosed arrays are not JSON at all, however deep (unless the parser ran out
            # of stack first); everything else is JSON refused for its depth alone.
            if not name.startswith("unclosed") and not error["message"].startswith(too_deep):
                answer += (error["message"],)
        if answer != expected:
            wrong.append((name, *answer))

    assert wrong == [], wrong
    assert rows_written() == before
    tracebacks = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


@pytest.mark.parametrize("path", ["/v1/refunds", "/v1/charges"])
def test_json_nested_up_to_the_limit_is_parsed(api, path):
    """The limit refuses nesting, not JSON: a body at exactly the limit is parsed, and
    refused for what it says (metadata values must be strings), like any other body."""
    charge = ChargeFactory(amount=10_000)
    # The body object, metadata, then arrays: MAX_JSON_DEPTH levels in all.
    body = with_metadata_value(path, charge.pk, nested_arrays(MAX_JSON_DEPTH - 2, closed=True))

    response = api.post(path, body, content_type="application/json")

    error = assert_envelope(response, "POST", path)
    assert error is not None
    assert (response.status_code, error["code"]) == (400, "parameter_invalid")
    assert Refund.objects.count() == 0 and Charge.objects.count() == 1


@pytest.mark.parametrize("path", ["/v1/refunds", "/v1/charges/ch_x", "/v1/nowhere"])
def test_a_host_not_allowed_is_a_json_400_on_the_api(client, api_key, path):
    response = client.post(
        path,
        "amount=1",
        content_type="application/x-www-form-urlencoded",
        HTTP_HOST="evil.example",
        HTTP_AUTHORIZATION=f"Bearer {api_key}",
    )

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_invalid")
    assert "Host" in error["message"]
    assert Refund.objects.count() == 0


def test_a_host_not_allowed_is_djangos_page_elsewhere(client):
    response = client.get("/admin/login/", HTTP_HOST="evil.example")

    assert response.status_code == 400 and "application/json" not in response["Content-Type"]
