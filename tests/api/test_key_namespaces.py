"""Idempotency-Key from API clients: the back office's own namespaces are refused, and so
is a header that is not one key of printable ASCII. Each refusal is a 400 in Stripe's
envelope, decided before anything is read or written, so no key is bound.

The back office mints keys for itself (admin:<hex> in the refund form,
admin-bulk:<hex>:<charge> in the bulk refund, bulk:<batch>:<row> in bulk_refund,
demo:<charge>:<n> in seed_demo). A client key there could take one minted later: the
probe's API refund keyed bulk:probe-batch:1 made row 1 of `bulk_refund --batch-id
probe-batch` look changed since the batch ran."""

from __future__ import annotations

import http.client
import json
import socket

import pytest
import stripe

from ledger_app.access.api_keys import create_api_key
from ledger_app.admin.form_keys import new_form_key
from ledger_app.idempotency.services import ADMIN_BULK_KEYS, RESERVED_KEY_PREFIXES
from ledger_app.models import Charge, IdempotencyRecord, Refund
from ledger_app.refunds.bulk import BulkRow, row_request
from tests.commands.bulk_runs import bulk as bulk_refund
from tests.commands.bulk_runs import write_csv
from tests.factories import ChargeFactory
from tests.invariants import rows_written
from tests.processes import GunicornServer

FORM = "application/x-www-form-urlencoded"
PREFIXES = ["admin:", "admin-bulk:", "bulk:", "demo:"]
ENDPOINTS = ["/v1/refunds", "/v1/charges"]


@pytest.fixture(autouse=True)
def _instant_provider(settings):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0


def body_for(path: str, charge: Charge) -> str:
    return f"charge={charge.pk}&amount=100" if path == "/v1/refunds" else "amount=100&currency=usd"


def post(api, path: str, body: str, key: str):
    return api.post(path, body, content_type=FORM, HTTP_IDEMPOTENCY_KEY=key)


def assert_refused(response, code: str) -> dict:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        code,
        "idempotency_key",
    )
    return error


class TestReservedNamespaces:
    def test_the_reserved_prefixes_are_the_back_offices_own(self):
        assert set(RESERVED_KEY_PREFIXES) == set(PREFIXES)

    def test_every_key_the_back_office_mints_is_in_one(self):
        row = BulkRow(number=1, charge="ch_x", amount=None, reason="", note="", idempotency_key="")
        minted = [
            new_form_key(),
            f"{new_form_key(ADMIN_BULK_KEYS)}:ch_x",  # as the admin's bulk refund keys a row
            row_request(row, batch_id="b7", actor="cli")[1],
        ]

        for key in minted:
            assert key.startswith(tuple(RESERVED_KEY_PREFIXES)), key

    @pytest.mark.django_db
    @pytest.mark.parametrize("path", ENDPOINTS)
    @pytest.mark.parametrize("prefix", PREFIXES)
    @pytest.mark.parametrize("case", [str, str.upper, str.title], ids=["as-is", "upper", "title"])
    def test_a_client_key_in_one_is_refused_on_both_creates(self, api, path, prefix, case):
        charge = ChargeFactory(amount=10_000)
        before = rows_written()

        response = post(api, path, body_for(path, charge), case(prefix) + "order-17")

        error = assert_refused(response, "idempotency_key_reserved")
        assert repr(prefix) in error["message"]
        assert rows_written() == before

    @pytest.mark.django_db
    @pytest.mark.parametrize("key", ["bulk", "bulk-17", "demo-order:1", "my-admin:1", "adminx:1"])
    def test_a_key_that_only_looks_like_one_is_a_clients(self, api, key):
        charge = ChargeFactory(amount=10_000)

        response = post(api, "/v1/refunds", body_for("/v1/refunds", charge), key)

        assert response.status_code == 200, response.content
        assert IdempotencyRecord.objects.get(key=key).refund_id == response.json()["id"]

    @pytest.mark.django_db
    def test_the_probes_client_key_no_longer_spoils_the_operators_batch(self, api, tmp_path):
        charge = ChargeFactory(amount=5_000)

        refused = post(api, "/v1/refunds", f"charge={charge.pk}&amount=100", "bulk:probe-batch:1")
        code, out, err = bulk_refund(
            write_csv(tmp_path / "in.csv", [[charge.pk, "1000", "", "row 1"]]),
            "--batch-id",
            "probe-batch",
        )

        assert_refused(refused, "idempotency_key_reserved")
        assert code == 0, err
        assert "1 row: 1 refunded" in out and "REFUSED" not in err
        refund = Refund.objects.get()
        assert (refund.amount, refund.source) == (1_000, "bulk")
        assert IdempotencyRecord.objects.get().key == "bulk:probe-batch:1"


@pytest.mark.django_db
class TestTheHeader:
    @pytest.mark.parametrize("path", ENDPOINTS)
    @pytest.mark.parametrize(
        "key",
        ["k\u00e9y", "k\u00c3\u00a9y", "refund-\U0001f4b8", "order\u00a017"],
        ids=["latin-1-bytes", "utf-8-bytes", "beyond-latin-1", "no-break-space"],
    )
    def test_a_key_that_is_not_ascii_is_refused(self, api, path, key):
        charge = ChargeFactory(amount=10_000)
        before = rows_written()

        response = post(api, path, body_for(path, charge), key)

        error = assert_refused(response, "invalid_idempotency_key")
        assert "printable ASCII" in error["message"]
        assert rows_written() == before

    @pytest.mark.parametrize("path", ENDPOINTS)
    @pytest.mark.parametrize("key", ["a,b", "order-17,", ",", "a, b"])
    def test_a_comma_is_refused_as_a_repeated_header(self, api, path, key):
        charge = ChargeFactory(amount=10_000)
        before = rows_written()

        response = post(api, path, body_for(path, charge), key)

        error = assert_refused(response, "invalid_idempotency_key")
        assert "more than once" in error["message"] and "comma" in error["message"]
        assert rows_written() == before

    def test_a_control_character_is_named_as_one(self, api):
        charge = ChargeFactory(amount=10_000)

        response = post(api, "/v1/refunds", body_for("/v1/refunds", charge), "order\t17")

        assert (
            "control characters" in assert_refused(response, "invalid_idempotency_key")["message"]
        )

    def test_the_key_is_checked_before_the_parameters(self, api):
        response = post(api, "/v1/refunds", "charge=ch_nothing&amount=abc", "k\u00e9y")

        assert_refused(response, "invalid_idempotency_key")

    @pytest.mark.parametrize("path", ENDPOINTS)
    def test_a_printable_ascii_key_makes_one_object_and_replays_it(self, api, path):
        charge = ChargeFactory(amount=10_000)
        key = "Order 17/refund #1 ~ ' OR 1=1 -- <b>"

        first = post(api, path, body_for(path, charge), key)
        again = post(api, path, body_for(path, charge), key)

        assert first.status_code == again.status_code == 200, first.content
        assert again.json()["id"] == first.json()["id"]
        assert again["Idempotent-Replayed"] == "true"
        assert IdempotencyRecord.objects.get().key == key


# --- over the wire: raw bytes to a real gunicorn, and the official stripe client ---------


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, tmp_path_factory):
    """One server for the module: gunicorn as `make run` serves, on the test database."""
    server = GunicornServer(
        tmp_path_factory.mktemp("gunicorn"),
        workers=1,
        threads=2,
        REFUND_DISPATCH="inline",
        SIMULATED_GATEWAY_LATENCY_MS="0",
        LOG_LEVEL="ERROR",
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def send_raw(server: GunicornServer, path: str, headers: list[bytes], body: bytes):
    """One POST written byte for byte (no client library re-encodes or merges headers);
    the status, the headers and the parsed JSON body."""
    head = [
        f"POST {path} HTTP/1.1".encode(),
        f"Host: 127.0.0.1:{server.port}".encode(),
        b"Connection: close",
        f"Content-Type: {FORM}".encode(),
        f"Content-Length: {len(body)}".encode(),
        *headers,
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        payload = json.loads(response.read())
        return response.status, response.headers, payload


@pytest.mark.django_db(transaction=True)
class TestOverTheWire:
    @pytest.fixture
    def auth(self) -> bytes:
        return f"Authorization: Bearer {create_api_key(name='wire')[1]}".encode()

    def refund_body(self) -> bytes:
        return f"charge={ChargeFactory(amount=10_000).pk}&amount=100".encode()

    @pytest.mark.parametrize(
        "raw_key", ["k\u00e9y".encode(), "k\u00e9y".encode("latin-1")], ids=["utf-8", "latin-1"]
    )
    def test_non_ascii_bytes_are_refused_by_the_real_server(self, gunicorn, auth, raw_key):
        body = self.refund_body()
        before = rows_written()

        status, _, payload = send_raw(
            gunicorn, "/v1/refunds", [auth, b"Idempotency-Key: " + raw_key], body
        )

        assert status == 400, payload
        assert payload["error"]["code"] == "invalid_idempotency_key", payload
        assert payload["error"]["param"] == "idempotency_key"
        assert "printable ASCII" in payload["error"]["message"]
        assert rows_written() == before

    @pytest.mark.parametrize("path", ENDPOINTS)
    def test_two_idempotency_key_headers_are_refused(self, gunicorn, auth, path):
        body = self.refund_body() if path == "/v1/refunds" else b"amount=100&currency=usd"
        before = rows_written()

        status, _, payload = send_raw(
            gunicorn, path, [auth, b"Idempotency-Key: a", b"Idempotency-Key: b"], body
        )

        assert status == 400, payload
        assert set(payload) == {"error"}
        assert payload["error"]["type"] == "invalid_request_error"
        assert payload["error"]["code"] == "invalid_idempotency_key"
        assert "more than once" in payload["error"]["message"]
        assert rows_written() == before

    def test_one_ascii_key_still_works_and_replays(self, gunicorn, auth):
        body = self.refund_body()
        headers = [auth, b"Idempotency-Key: order-17-refund-1"]

        first = send_raw(gunicorn, "/v1/refunds", headers, body)
        again = send_raw(gunicorn, "/v1/refunds", headers, body)

        assert (first[0], again[0]) == (200, 200), first[2]
        assert again[2]["id"] == first[2]["id"]
        assert again[1]["Idempotent-Replayed"] == "true"
        assert Refund.objects.count() == 1

    def test_the_stripe_client_gets_the_refusals_as_errors(self, stripe_client):
        charge = ChargeFactory(amount=10_000)
        params = {"charge": charge.pk, "amount": 100}

        with pytest.raises(stripe.InvalidRequestError) as reserved:
            stripe_client.v1.refunds.create(
                params=params, options={"idempotency_key": "bulk:probe-batch:1"}
            )
        with pytest.raises(stripe.InvalidRequestError) as non_ascii:
            stripe_client.v1.refunds.create(params=params, options={"idempotency_key": "k\u00e9y"})

        assert (reserved.value.http_status, reserved.value.code) == (
            400,
            "idempotency_key_reserved",
        )
        assert (non_ascii.value.http_status, non_ascii.value.code) == (
            400,
            "invalid_idempotency_key",
        )
        assert Refund.objects.count() == 0
