"""One table of bad requests against the real /v1/ endpoints.

Every row is sent with Django's test client and must come back as a 4xx in Stripe's
envelope ({"error": {"type", "code", "message"}}), with a Request-Id header, with the
expected status, code (and param where it matters), and without writing anything:
no charge, refund, ledger entry, idempotency record or provider request, and no change
to any charge's amount_refunded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from ledger_app.access.api_keys import create_api_key, revoke_api_key
from ledger_app.models import Charge, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.api.conftest import basic_auth
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
UNCHECKED = object()  # the row does not care about error.param


@dataclass(frozen=True)
class Bad:
    """A bad request and the refusal it must get.

    `body`: a str (form-encoded unless `content_type` says otherwise), bytes (sent as
    they are with `content_type`), or any other value (sent as JSON). Placeholders such
    as {charge} are replaced by the ids of the charges the test creates.
    `param`: the expected error.param; None means the envelope has no param.
    `auth`: which Authorization header to send (see `authorization`).
    """

    id: str
    method: str
    path: str
    status: int
    code: str
    body: Any = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    param: Any = UNCHECKED
    auth: str = "key"
    message_contains: str | None = None


def refund(body: str | bytes, status: int = 400, **kw: Any) -> dict:
    return {"method": "post", "path": "/v1/refunds", "body": body, "status": status, **kw}


def charge_create(body: Any, status: int = 400, **kw: Any) -> dict:
    return {"method": "post", "path": "/v1/charges", "body": body, "status": status, **kw}


def get(path: str, status: int = 400, **kw: Any) -> dict:
    return {"method": "get", "path": path, "status": status, **kw}


def bad_amount(row_id: str, value: str) -> Bad:
    return Bad(
        row_id,
        **refund(f"charge={{charge}}&amount={value}"),
        code="parameter_invalid_integer",
        param="amount",
    )


def json_refund(row_id: str, payload: Any, status: int = 400, **kw: Any) -> Bad:
    return Bad(row_id, **refund(payload, status=status, content_type=JSON), **kw)


def idempotency_key(row_id: str, key: str, path: str = "/v1/refunds") -> Bad:
    body = "charge={charge}&amount=100" if path == "/v1/refunds" else "amount=100&currency=usd"
    return Bad(
        row_id,
        "post",
        path,
        400,
        "invalid_idempotency_key",
        body=body,
        headers={"HTTP_IDEMPOTENCY_KEY": key},
        param="idempotency_key",
    )


# Hostile inputs to POST /v1/refunds (amounts, brackets, metadata, keys, charge ids, text,
# oversize bodies) are in tests/hostile_inputs.json, tried on the API, the admin and the
# refund command alike; this table keeps the rest of the API.
# fmt: off
ROWS = [
    # --- amount: form integers are strings of ASCII digits, and amounts are 1..2**63-1 ---
    bad_amount("form-amount-plus-as-space", "+5"),
    # --- missing and unknown parameters ---
    Bad("refund-without-charge", **refund("amount=100"), code="parameter_missing", param="charge"),
    Bad("charge-without-amount", **charge_create("currency=usd"), code="parameter_missing",
        param="amount"),
    Bad("charge-without-currency", **charge_create("amount=100"), code="parameter_missing",
        param="currency"),
    Bad("charge-unknown-param", **charge_create("amount=100&currency=usd&statement_descriptor=a"),
        code="parameter_unknown", param="statement_descriptor"),
    Bad("charge-receipt-email-invalid", **charge_create("amount=100&currency=usd&receipt_email=a"),
        code="email_invalid", param="receipt_email"),
    # An address Django's validator takes but the SMTP library cannot encode (its domain).
    Bad("refund-instructions-email-unsendable",
        **refund("charge={charge}&amount=100&instructions_email=a@b%EF%BF%BDc.com"),
        code="email_invalid", param="instructions_email"),
    Bad("refund-instructions-email-two-lines",
        **refund("charge={charge}&amount=100&instructions_email=a@b.com%0D%0ABcc:x@y.z"),
        code="email_invalid", param="instructions_email"),
    Bad("charge-uncaptured", **charge_create("amount=100&currency=usd&capture=false"),
        code="parameter_invalid", param="capture"),
    Bad("charges-list-customer-NUL", **get("/v1/charges?customer=%00"), code="parameter_invalid",
        param="customer"),
    Bad("charges-list-customer-too-long", **get("/v1/charges?customer=" + "c" * 256),
        code="parameter_invalid", param="customer"),
    Bad("charges-list-unknown-param", **get("/v1/charges?transfer_group=g"),
        code="parameter_unknown", param="transfer_group"),
    Bad("refund-retrieve-expand-unknown", **get("/v1/refunds/re_x?expand[]=balance_transaction"),
        code="parameter_invalid", param="expand"),
    Bad("refund-list-expand-not-in-data", **get("/v1/refunds?expand[]=charge"),
        code="parameter_invalid", param="expand"),
    # --- bracket notation abuse ---
    Bad("expand-without-brackets", **get("/v1/charges/{charge}?expand=refunds"),
        code="parameter_invalid", param="expand"),
    Bad("expand-unknown-property", **get("/v1/charges/{charge}?expand[]=customer"),
        code="parameter_invalid", param="expand"),
    # --- Idempotency-Key on charges (refunds: tests/hostile_inputs.json) ---
    idempotency_key("charge-idempotency-key-256-chars", "k" * 256, path="/v1/charges"),
    # --- unknown ids: 400 with param in the body, 404 in the path ---
    Bad("charge-retrieve-unknown", **get("/v1/charges/ch_doesnotexist", status=404),
        code="resource_missing", param=None),
    Bad("charge-retrieve-NUL", **get("/v1/charges/ch_%00x", status=404), code="resource_missing",
        param=None),
    Bad("charge-retrieve-200-chars", **get("/v1/charges/" + "c" * 200, status=404),
        code="resource_missing", param=None),
    Bad("refund-retrieve-unknown", **get("/v1/refunds/re_doesnotexist", status=404),
        code="resource_missing", param=None),
    Bad("refund-retrieve-200-chars", **get("/v1/refunds/" + "r" * 200, status=404),
        code="resource_missing", param=None),
    # --- lists ---
    Bad("limit-0", **get("/v1/refunds?limit=0"), code="parameter_invalid_integer", param="limit"),
    Bad("limit-101", **get("/v1/charges?limit=101"), code="parameter_invalid_integer",
        param="limit"),
    Bad("limit-abc", **get("/v1/refunds?limit=abc"), code="parameter_invalid_integer",
        param="limit"),
    Bad("limit-twice", **get("/v1/charges?limit=1&limit=2"), code="parameter_invalid",
        param="limit"),
    Bad("starting-after-unknown", **get("/v1/refunds?starting_after=re_doesnotexist"),
        code="resource_missing", param="starting_after"),
    Bad("ending-before-unknown", **get("/v1/charges?ending_before=ch_doesnotexist"),
        code="resource_missing", param="ending_before"),
    Bad("starting-after-and-ending-before", **get("/v1/refunds?starting_after=a&ending_before=b"),
        code="parameters_exclusive"),
    Bad("refunds-filter-charge-NUL", **get("/v1/refunds?charge=%00"), code="resource_missing",
        param="charge"),
    Bad("starting-after-NUL", **get("/v1/refunds?starting_after=re_%00"),
        code="resource_missing", param="starting_after"),
    Bad("ending-before-NUL", **get("/v1/charges?ending_before=ch_%00"),
        code="resource_missing", param="ending_before"),
    Bad("balance-transactions-type-NUL", **get("/v1/balance_transactions?type=charge%00"),
        code="parameter_invalid", param="type"),
    Bad("payout-retrieve-unknown", **get("/v1/payouts/po_doesnotexist", status=404),
        code="resource_missing", param=None),
    # --- malformed bodies and content types ---
    json_refund("json-malformed", '{"charge": ', code="body_invalid"),
    json_refund("json-array", '[{"charge": "{charge}"}]', code="body_invalid"),
    json_refund("json-string", '"charge"', code="body_invalid"),
    json_refund("json-null", "null", code="body_invalid"),
    Bad("json-invalid-utf8", **refund(b'{"charge": "\xff"}', content_type=JSON),
        code="body_invalid"),
    json_refund("json-lone-surrogate-amount", '{"charge": "{charge}", "amount": "\\ud800"}',
                code="body_invalid"),
    json_refund("json-lone-surrogate-param-name", '{"charge": "{charge}", "\\ud800": 1}',
                code="body_invalid"),
    json_refund("json-lone-surrogate-expand", '{"charge": "{charge}", "expand": ["\\ud800"]}',
                code="body_invalid"),
    Bad("text-plain-body", **refund("charge={charge}&amount=100", status=415,
                                    content_type="text/plain"), code="content_type_unsupported"),
    Bad("xml-body", **refund(b"<refund><charge>{charge}</charge></refund>", status=415,
                             content_type="application/xml"), code="content_type_unsupported"),
    Bad("multipart-body",
        **refund(b'--XX\r\nContent-Disposition: form-data; name="charge"\r\n\r\n'
                 b"{charge}\r\n--XX--\r\n",
                 status=415, content_type="multipart/form-data; boundary=XX"),
        code="content_type_unsupported"),
    # --- text fields: SQL and HTML are just invalid values ---
    Bad("description-html-1001-chars", **charge_create("amount=100&currency=usd&description="
                                                       + "%3Cb%3E" * 334),
        code="parameter_invalid", param="description"),
    Bad("description-sql-with-NUL",
        **charge_create("amount=100&currency=usd&description=x%27%20OR%201%3D1%00"),
        code="parameter_invalid", param="description"),
    Bad("charge-currency-unknown", **charge_create("amount=100&currency=zzz"),
        code="parameter_invalid", param="currency"),
    Bad("charge-currency-two-letters", **charge_create("amount=100&currency=us"),
        code="parameter_invalid", param="currency"),
    Bad("charge-amount-decimal", **charge_create("amount=1.00&currency=usd"),
        code="parameter_invalid_integer", param="amount"),
    Bad("charge-amount-zero", **charge_create({"amount": 0, "currency": "usd"}, content_type=JSON),
        code="parameter_invalid_integer", param="amount"),
    # --- API keys ---
    Bad("no-api-key", **refund("charge={charge}&amount=100", status=401), auth="none",
        code="api_key_missing"),
    Bad("wrong-api-key", **refund("charge={charge}&amount=100", status=401), auth="wrong",
        code="api_key_invalid"),
    Bad("revoked-api-key", **refund("charge={charge}&amount=100", status=401), auth="revoked",
        code="api_key_invalid"),
    Bad("basic-auth-not-base64", **get("/v1/charges", status=401), auth="basic-garbage",
        code="api_key_invalid"),
    Bad("basic-auth-wrong-key", **get("/v1/refunds", status=401), auth="basic-wrong",
        code="api_key_invalid"),
    Bad("unknown-auth-scheme", **get("/v1/charges/{charge}", status=401), auth="token",
        code="api_key_invalid"),
    Bad("read-only-key-refund", **refund("charge={charge}&amount=100", status=403),
        auth="read-only", code="api_key_read_only"),
    Bad("read-only-key-charge", **charge_create("amount=100&currency=usd", status=403),
        auth="read-only", code="api_key_read_only"),
    # --- refunds the ledger refuses ---
    Bad("refund-pending-charge", **refund("charge={pending}"), code="charge_not_refundable",
        param="charge"),
    Bad("refund-failed-charge", **refund("charge={failed}&amount=1"),
        code="charge_not_refundable", param="charge"),
    Bad("refund-fully-refunded-charge", **refund("charge={refunded}"),
        code="charge_already_refunded", param="charge"),
    Bad("refund-more-than-left", **refund("charge={partial}&amount=7501"),
        code="amount_too_large", param="amount", message_contains="($75.00)"),
    Bad("refund-more-than-left-with-key", **refund("charge={partial}&amount=9000"),
        headers={"HTTP_IDEMPOTENCY_KEY": "order-17-refund"}, code="amount_too_large",
        param="amount", message_contains="($75.00)"),
    # --- methods the endpoints do not have ---
    Bad("put-refunds", **refund("charge={charge}&amount=100", status=405) | {"method": "put"},
        code="method_not_allowed"),
    Bad("delete-refunds", "delete", "/v1/refunds", 405, "method_not_allowed"),
    Bad("patch-refund", "patch", "/v1/refunds/re_x", 405, "method_not_allowed",
        body="amount=1", content_type=FORM),
    Bad("delete-charge", "delete", "/v1/charges/{charge}", 405, "method_not_allowed"),
    Bad("post-to-a-charge", "post", "/v1/charges/{charge}", 405, "method_not_allowed",
        body="amount=1", content_type=FORM),
]
# fmt: on


@pytest.fixture
def charges(succeeded_charge, settings) -> dict[str, str]:
    """Every charge a row can name, by placeholder."""
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    partial = ChargeFactory(amount=10_000, currency="usd")
    create_refund(RefundRequest(charge_id=partial.id, amount=2_500))
    refunded = ChargeFactory(amount=2_500, currency="usd")
    create_refund(RefundRequest(charge_id=refunded.id))
    return {
        "charge": succeeded_charge.id,
        "partial": partial.id,
        "refunded": refunded.id,
        "pending": ChargeFactory(status=Charge.Status.PENDING).id,
        "failed": ChargeFactory(status=Charge.Status.FAILED).id,
    }


def authorization(kind: str, api_key: str) -> str | None:
    if kind == "key":
        return f"Bearer {api_key}"
    if kind == "none":
        return None
    if kind == "wrong":
        return "Bearer sk_" + "x" * 40
    if kind == "revoked":
        key, secret = create_api_key(name="leaked")
        revoke_api_key(prefix=key.prefix)
        return f"Bearer {secret}"
    if kind == "read-only":
        return f"Bearer {create_api_key(name='reporting', read_only=True)[1]}"
    if kind == "basic-garbage":
        return "Basic !!not-base64!!"
    if kind == "basic-wrong":
        return basic_auth("sk_" + "y" * 40)
    if kind == "token":
        return f"Token {api_key}"
    raise AssertionError(f"unknown auth kind {kind}")


def fill(template: str | bytes, ids: dict[str, str]) -> Any:
    for name, value in ids.items():
        if isinstance(template, bytes):
            template = template.replace(f"{{{name}}}".encode(), value.encode())
        else:
            template = template.replace(f"{{{name}}}", value)
    return template


def encode(row: Bad, ids: dict[str, str]) -> tuple[Any, str | None]:
    if row.body is None:
        return None, row.content_type
    if isinstance(row.body, bytes):
        return fill(row.body, ids), row.content_type
    if isinstance(row.body, str):
        return fill(row.body, ids), row.content_type or FORM
    return fill(json.dumps(row.body), ids), row.content_type or JSON


def everything_written(charge_ids) -> tuple:
    return (
        Charge.objects.count(),
        Refund.objects.count(),
        LedgerEntry.objects.count(),
        IdempotencyRecord.objects.count(),
        ProviderRequest.objects.count(),
        dict(Charge.objects.filter(pk__in=charge_ids).values_list("pk", "amount_refunded")),
    )


def send(client, row: Bad, ids: dict[str, str], api_key: str):
    extra = dict(row.headers)
    header = authorization(row.auth, api_key)
    if header is not None:
        extra["HTTP_AUTHORIZATION"] = header
    data, content_type = encode(row, ids)
    kwargs: dict[str, Any] = {}
    if data is not None:
        kwargs["data"] = data
    if content_type is not None:
        kwargs["content_type"] = content_type
    # generic() sends the body as it is: no re-encoding, no multipart for dicts.
    if isinstance(kwargs.get("data"), str):
        kwargs["data"] = kwargs["data"].encode("utf-8", "surrogatepass")
    return client.generic(row.method.upper(), fill(row.path, ids), **kwargs, **extra)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_request_is_refused_in_the_envelope_and_writes_nothing(client, api_key, charges, row):
    client.raise_request_exception = False  # a 500 must show up as a response here
    before = everything_written(charges.values())

    response = send(client, row, charges, api_key)

    assert response.status_code < 500, response.content[:500]
    assert response.status_code == row.status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    assert response.has_header("Request-Id")
    assert response["Request-Id"].startswith("req_")
    envelope = response.json()
    assert set(envelope) == {"error"}
    error = envelope["error"]
    assert {"type", "code", "message"} <= set(error)
    assert set(error) <= {"type", "code", "message", "param"}
    assert error["type"] == "invalid_request_error"
    assert error["code"] == row.code, error
    assert isinstance(error["message"], str) and error["message"]
    if row.param is not UNCHECKED:
        assert error.get("param") == row.param, error
    if row.message_contains is not None:
        assert row.message_contains in error["message"]
    assert everything_written(charges.values()) == before


def test_table_is_big_enough_and_ids_are_unique():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids))
    assert len(ROWS) >= 45


@pytest.mark.parametrize(
    ("refused_body", "refused_code"),
    [
        ("charge={charge}&amount=10001", "amount_too_large"),
        ("charge={charge}&amount=5.5", "parameter_invalid_integer"),
        ("charge={charge}&amount=100&reason=because", "parameter_invalid"),
    ],
    ids=["amount-too-large", "not-an-integer", "bad-reason"],
)
def test_a_refused_request_binds_no_key(
    api, succeeded_charge, settings, refused_body, refused_code
):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    ids = {"charge": succeeded_charge.id}
    key = "order-17-refund-1"

    refused = api.post(
        "/v1/refunds", fill(refused_body, ids), content_type=FORM, HTTP_IDEMPOTENCY_KEY=key
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == refused_code
    assert IdempotencyRecord.objects.count() == 0

    corrected = api.post(
        "/v1/refunds",
        f"charge={succeeded_charge.id}&amount=10000",
        content_type=FORM,
        HTTP_IDEMPOTENCY_KEY=key,
    )

    assert corrected.status_code == 200, corrected.content
    assert not corrected.has_header("Idempotent-Replayed")
    body = corrected.json()
    assert body["object"] == "refund" and body["amount"] == 10_000
    record = IdempotencyRecord.objects.get(key=key)
    assert record.refund_id == body["id"]
    succeeded_charge.refresh_from_db()
    assert succeeded_charge.amount_refunded == 10_000
    assert Refund.objects.count() == 1
