"""Failed API authentications are limited per client address (API_AUTH_FAILURE_LIMIT):
past the limit a wrong key from that address gets Stripe's 429 rate_limit envelope until
the period ends, without a lookup; a right key is never held back; other addresses are
not affected; nothing logs a secret."""

from __future__ import annotations

import logging

import pytest

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import RateCounter
from tests.clock import start_of_a_window

pytestmark = pytest.mark.django_db

WRONG = "sk_test_not_a_key_0123456789"


@pytest.fixture
def secret():
    return create_api_key(name="limit-test")[1]


@pytest.fixture(autouse=True)
def three_a_minute(settings, time_machine):
    settings.API_AUTH_FAILURE_LIMIT = "3/minute"
    # A test's requests all fall into one window: its clock starts a second into a new one.
    time_machine.move_to(start_of_a_window(60), tick=True)


def get(client, key, address="10.1.1.1"):
    return client.get("/v1/charges", HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR=address)


def test_past_the_limit_wrong_keys_get_429_and_are_not_looked_up(
    client, secret, django_assert_num_queries
):
    for _ in range(3):
        assert get(client, WRONG).status_code == 401

    with django_assert_num_queries(1):  # the shared counter only, no API key lookup
        refused = get(client, WRONG)

    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "rate_limit"
    assert 1 <= int(refused["Retry-After"]) <= 60


def test_a_right_key_is_never_held_back_and_is_not_counted(client, secret):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(5):
        get(client, WRONG)

    with CaptureQueriesContext(connection) as queries:
        assert get(client, secret).status_code == 200
    assert not any("api-auth-failures" in q["sql"] for q in queries.captured_queries)


def test_a_right_key_leaves_the_address_its_budget_of_wrong_ones(client, secret):
    get(client, WRONG)
    get(client, secret)
    get(client, secret)

    assert [get(client, WRONG).status_code for _ in range(3)] == [401, 401, 429]


def test_other_addresses_are_not_limited(client, secret):
    for _ in range(4):
        get(client, WRONG, address="10.1.1.1")

    assert get(client, WRONG, address="10.1.1.1").status_code == 429
    assert get(client, WRONG, address="10.2.2.2").status_code == 401


def test_basic_credentials_and_unknown_schemes_count_too(client, secret):
    import base64

    basic = base64.b64encode(b"sk_test_wrong:").decode()
    client.get("/v1/charges", HTTP_AUTHORIZATION=f"Basic {basic}", REMOTE_ADDR="10.1.1.1")
    client.get("/v1/charges", HTTP_AUTHORIZATION="Token abc", REMOTE_ADDR="10.1.1.1")
    client.get("/v1/charges", HTTP_AUTHORIZATION="Basic !!!", REMOTE_ADDR="10.1.1.1")

    assert get(client, WRONG).status_code == 429


def test_the_count_is_a_row_every_process_shares(client):
    get(client, WRONG)
    get(client, WRONG)

    counter = RateCounter.objects.get(key="api-auth-failures:10.1.1.1/60s")  # 3/minute
    assert counter.count == 2
    assert (counter.window_ends_at - counter.window_started_at).total_seconds() == 60


def test_failures_are_logged_with_the_address_and_never_the_key(client, secret, caplog):
    caplog.set_level(logging.INFO)
    get(client, WRONG)
    get(client, secret)

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "API authentication failed from 10.1.1.1" in logged
    assert WRONG not in logged and secret not in logged


@pytest.mark.parametrize("credentials", ["\xe9\xe9", "\u00e9=", "bm9uZQ==\u00ff"])
def test_non_ascii_basic_credentials_are_a_wrong_key_not_a_crash(client, credentials):
    response = client.get(
        "/v1/charges", HTTP_AUTHORIZATION=f"Basic {credentials}", REMOTE_ADDR="10.1.1.1"
    )

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "api_key_invalid"
