"""API keys, Request-Id, logs, throttling and the schema."""

import logging

import pytest
from django.core.cache import cache
from django.core.management import call_command

from ledger_app.access.api_keys import create_api_key, revoke_api_key
from ledger_app.models import ApiKey, Refund
from tests.api.conftest import basic_auth

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"


def refund_form(charge, amount=100):
    return f"charge={charge.id}&amount={amount}"


class TestApiKeys:
    def test_only_a_hash_of_the_secret_is_stored(self, api_key):
        row = ApiKey.objects.get()
        stored = " ".join(str(v) for v in ApiKey.objects.values_list().get())

        assert api_key not in stored
        assert api_key[11:] not in stored
        assert row.prefix == api_key[:11]
        assert len(row.secret_hash) == 64 and row.secret_hash != api_key

    def test_http_basic_with_the_key_as_user_name_works(self, client, api_key, succeeded_charge):
        response = client.get(
            f"/v1/charges/{succeeded_charge.id}", HTTP_AUTHORIZATION=basic_auth(api_key)
        )

        assert response.status_code == 200
        assert response.json()["id"] == succeeded_charge.id

    @pytest.mark.parametrize(
        "header",
        ["", "Bearer", "Bearer sk_wrong", "Token abc", "Basic !!!notbase64", "Bearer " + "x" * 500],
    )
    def test_missing_or_wrong_key_is_401_everywhere(self, client, succeeded_charge, header):
        extra = {"HTTP_AUTHORIZATION": header} if header else {}
        for method, path in [
            ("get", "/v1/charges"),
            ("get", f"/v1/charges/{succeeded_charge.id}"),
            ("get", "/v1/refunds"),
            ("get", "/v1/refunds/re_x"),
            ("post", "/v1/refunds"),
            ("post", "/v1/charges"),
        ]:
            response = getattr(client, method)(path, **extra)
            assert response.status_code == 401, (method, path, header)
            assert response.json()["error"]["code"] in {"api_key_missing", "api_key_invalid"}
        assert Refund.objects.count() == 0

    def test_revoked_key_is_401(self, client, succeeded_charge):
        key, secret = create_api_key(name="leaked")
        revoke_api_key(prefix=key.prefix)

        response = client.get("/v1/charges", HTTP_AUTHORIZATION=f"Bearer {secret}")

        assert response.status_code == 401

    def test_read_only_key_cannot_write(self, client, read_only_key, succeeded_charge):
        auth = {"HTTP_AUTHORIZATION": f"Bearer {read_only_key}"}

        read = client.get("/v1/refunds", **auth)
        write = client.post("/v1/refunds", refund_form(succeeded_charge), content_type=FORM, **auth)
        charge = client.post("/v1/charges", "amount=100&currency=usd", content_type=FORM, **auth)

        assert read.status_code == 200
        assert (write.status_code, charge.status_code) == (403, 403)
        assert write.json()["error"]["code"] == "api_key_read_only"
        assert Refund.objects.count() == 0

    def test_create_api_key_command_prints_the_secret_once(self, capsys):
        call_command("create_api_key", "order-service", "--read-only")

        captured = capsys.readouterr()
        secret = captured.out.strip()
        key = ApiKey.objects.get()
        assert secret.startswith("sk_") and len(secret) == 43
        assert key.read_only and key.name == "order-service"
        assert key.prefix in captured.err and secret not in captured.err


class TestHeadersAndLogs:
    def test_every_response_has_a_request_id(self, api, client, succeeded_charge):
        responses = [
            api.get(f"/v1/charges/{succeeded_charge.id}"),
            api.get("/v1/charges/ch_missing"),
            client.get("/v1/refunds"),
            api.get("/v1/nowhere"),
            client.get("/admin/login/"),
        ]

        ids = [r["Request-Id"] for r in responses]
        assert all(i.startswith("req_") for i in ids)
        assert len(set(ids)) == len(ids)

    def test_logs_carry_the_request_id_and_never_the_secret(self, api, api_key, caplog):
        caplog.set_level(logging.INFO)

        response = api.get("/v1/charges/ch_missing")  # a 404 is logged by Django

        assert response.status_code == 404
        logged = [r for r in caplog.records if r.name == "django.request"]
        assert logged and logged[0].request_id == response["Request-Id"]
        assert all(api_key not in r.getMessage() for r in caplog.records)

    def test_a_replayed_refund_says_so(self, api, succeeded_charge):
        first = api.post(
            "/v1/refunds",
            refund_form(succeeded_charge),
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="k-api",
        )
        again = api.post(
            "/v1/refunds",
            refund_form(succeeded_charge),
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="k-api",
        )

        assert first.status_code == again.status_code == 200
        assert first.json()["id"] == again.json()["id"]
        assert "Idempotent-Replayed" not in first
        assert again["Idempotent-Replayed"] == "true"

    def test_json_bodies_work_like_forms(self, api, succeeded_charge):
        response = api.post(
            "/v1/refunds",
            {"charge": succeeded_charge.id, "amount": 250, "metadata": {"order": "A-1"}},
            content_type="application/json",
        )

        assert response.status_code == 200
        assert response.json()["metadata"] == {"order": "A-1"}
        assert Refund.objects.get().amount == 250

    def test_form_bracket_notation_is_folded(self, api, succeeded_charge):
        response = api.post(
            "/v1/refunds",
            f"charge={succeeded_charge.id}&amount=300&metadata[order]=A-17&metadata[agent]=ana",
            content_type=FORM,
        )

        assert response.status_code == 200
        assert Refund.objects.get().metadata == {"order": "A-17", "agent": "ana"}


def test_throttled_clients_get_429_with_retry_after(api, settings, succeeded_charge):
    settings.API_RATE_LIMIT = "3/minute"
    cache.clear()

    codes = [api.get("/v1/charges").status_code for _ in range(5)]
    last = api.get("/v1/charges")

    cache.clear()
    assert codes == [200, 200, 200, 429, 429]
    assert last.json()["error"]["type"] == "invalid_request_error"
    assert int(last["Retry-After"]) >= 1


def test_schema_and_docs_are_served(client):
    schema = client.get("/v1/openapi.json")
    docs = client.get("/v1/docs")

    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {
        "/v1/charges",
        "/v1/charges/{charge_id}",
        "/v1/refunds",
        "/v1/refunds/{refund_id}",
    } <= set(paths)
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()
    assert b"cdn." not in docs.content  # served from the sidecar package, works offline
