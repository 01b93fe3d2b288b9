"""schemathesis against /v1/openapi.json, served in-process by the WSGI application.

Generated requests (positive and negative, schemathesis' coverage and fuzzing phases)
must never get a 5xx, only documented status codes, JSON, a Request-Id header and,
for errors, Stripe's envelope. Response bodies must match the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from schemathesis.specs.openapi import checks as openapi_checks

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Event, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.api.books_rows import T, a_few_days_of_books
from tests.api.schema_checks import ALL_CHECKS, FUZZ, schema

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("wsgi_in_test_transaction")]


FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


@schema.include(path_regex="^/v1/refunds").parametrize()
@FUZZ
def test_fuzzed_refund_requests_conform(case, auth, succeeded_charge):
    case.call_and_validate(headers=auth, checks=ALL_CHECKS)


@schema.include(path_regex="^/v1/charges").parametrize()
@FUZZ
def test_fuzzed_charge_requests_conform(case, auth, succeeded_charge):
    case.call_and_validate(headers=auth, checks=ALL_CHECKS)


@pytest.fixture
def refunded_charge(succeeded_charge):
    """A charge with a refund, and so events of both."""
    create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=1_000))
    return succeeded_charge


@schema.include(path_regex="^/v1/events").parametrize()
@FUZZ
def test_fuzzed_event_requests_conform(case, auth, refunded_charge):
    case.call_and_validate(headers=auth, checks=ALL_CHECKS)


@pytest.fixture
def books(db):
    return a_few_days_of_books()


@schema.include(path_regex="^/v1/(balance_transactions|payouts)").parametrize()
@FUZZ
def test_fuzzed_balance_transaction_and_payout_requests_conform(case, auth, books):
    case.call_and_validate(headers=auth, checks=ALL_CHECKS)


@dataclass(frozen=True)
class Known:
    """A request whose answer is known; values such as "{charge}" are filled in."""

    id: str
    method: str
    path: str
    status: int
    path_parameters: dict = field(default_factory=dict)
    query: dict = field(default_factory=dict)
    body: Any = None
    media_type: str | None = None
    auth: str = "key"  # key, read-only or none


CHARGE = {"charge_id": "{charge}"}
# Query and form values as sent on the wire (created[gte]=0, metadata[k]=v): a Case sends
# them as given.
# fmt: off
KNOWN = [
    Known("charges-list", "GET", "/v1/charges", 200),
    Known("charges-retrieve", "GET", "/v1/charges/{charge_id}", 200, CHARGE),
    Known("charges-retrieve-expanded", "GET", "/v1/charges/{charge_id}", 200, CHARGE,
          query={"expand[]": ["refunds"]}),
    Known("charges-create", "POST", "/v1/charges", 200,
          body={"amount": 1500, "currency": "usd"}, media_type=FORM),
    Known("charges-retrieve-unknown", "GET", "/v1/charges/{charge_id}", 404,
          {"charge_id": "ch_nope"}),
    Known("charges-list-no-key", "GET", "/v1/charges", 401, auth="none"),
    Known("charges-create-read-only", "POST", "/v1/charges", 403,
          body={"amount": 1500, "currency": "usd"}, media_type=FORM, auth="read-only"),
    Known("refunds-create-form", "POST", "/v1/refunds", 200,
          body={"charge": "{charge}", "amount": 700, "reason": "duplicate"}, media_type=FORM),
    Known("refunds-create-json", "POST", "/v1/refunds", 200,
          body={"charge": "{charge}", "amount": 300, "metadata": {"order": "A-17"}},
          media_type=JSON),
    Known("refunds-create-the-rest", "POST", "/v1/refunds", 200, body={"charge": "{charge}"},
          media_type=FORM),
    Known("refunds-create-too-large", "POST", "/v1/refunds", 400,
          body={"charge": "{charge}", "amount": 10_001}, media_type=FORM),
    Known("refunds-retrieve", "GET", "/v1/refunds/{refund_id}", 200, {"refund_id": "{refund}"}),
    Known("refunds-retrieve-unknown", "GET", "/v1/refunds/{refund_id}", 404,
          {"refund_id": "re_nope"}),
    Known("refunds-list", "GET", "/v1/refunds", 200, query={"charge": "{charge}", "limit": 1}),
    Known("refunds-list-after", "GET", "/v1/refunds", 200, query={"starting_after": "{refund}"}),
    Known("refunds-list-created", "GET", "/v1/refunds", 200,
          query={"created[gte]": 0, "created[lt]": 253402300799}),
    Known("refunds-update-form", "POST", "/v1/refunds/{refund_id}", 200,
          {"refund_id": "{refund}"}, body={"metadata[ticket]": "T-9"}, media_type=FORM),
    Known("refunds-update-json", "POST", "/v1/refunds/{refund_id}", 200,
          {"refund_id": "{refund}"}, body={"metadata": {"ticket": ""}}, media_type=JSON),
    Known("refunds-update-unknown", "POST", "/v1/refunds/{refund_id}", 404,
          {"refund_id": "re_nope"}, body={"metadata": {"a": "b"}}, media_type=JSON),
    Known("refunds-update-read-only", "POST", "/v1/refunds/{refund_id}", 403,
          {"refund_id": "{refund}"}, body={"metadata[a]": "b"}, media_type=FORM,
          auth="read-only"),
    Known("charges-list-created", "GET", "/v1/charges", 200, query={"created[gt]": 1}),
    Known("charges-refunds-list", "GET", "/v1/charges/{charge_id}/refunds", 200, CHARGE,
          query={"limit": 1}),
    Known("charges-refunds-unknown", "GET", "/v1/charges/{charge_id}/refunds", 404,
          {"charge_id": "ch_nope"}),
    Known("events-list", "GET", "/v1/events", 200),
    Known("events-list-types", "GET", "/v1/events", 200,
          query={"types[]": ["refund.created", "charge.refunded"], "created[gte]": 1}),
    Known("events-list-type", "GET", "/v1/events", 200, query={"type": "charge.*"}),
    Known("events-list-bad-created", "GET", "/v1/events", 400, query={"created[gt]": "x"}),
    Known("events-retrieve", "GET", "/v1/events/{event_id}", 200, {"event_id": "{event}"}),
    Known("events-retrieve-unknown", "GET", "/v1/events/{event_id}", 404,
          {"event_id": "evt_nope"}),
    Known("events-list-read-only", "GET", "/v1/events", 200, auth="read-only"),
    Known("balance-transactions-list", "GET", "/v1/balance_transactions", 200),
    Known("balance-transactions-list-filtered", "GET", "/v1/balance_transactions", 200,
          query={"payout": "po_usd", "type": "charge", "currency": "usd", "created[gte]": T,
                 "limit": 1}),
    Known("balance-transactions-list-bad-type", "GET", "/v1/balance_transactions", 400,
          query={"type": "charge.succeeded"}),
    Known("balance-transactions-retrieve", "GET",
          "/v1/balance_transactions/{balance_transaction_id}", 200,
          {"balance_transaction_id": "txn_dispute_usd"}),
    Known("balance-transactions-retrieve-unknown", "GET",
          "/v1/balance_transactions/{balance_transaction_id}", 404,
          {"balance_transaction_id": "txn_nope"}),
    Known("payouts-list", "GET", "/v1/payouts", 200,
          query={"status": "paid", "arrival_date[gte]": T, "ending_before": "po_usd"}),
    Known("payouts-retrieve", "GET", "/v1/payouts/{payout_id}", 200, {"payout_id": "po_eur"}),
    Known("payouts-retrieve-unknown", "GET", "/v1/payouts/{payout_id}", 404,
          {"payout_id": "po_nope"}),
    Known("payouts-list-read-only", "GET", "/v1/payouts", 200, auth="read-only"),
]
# fmt: on


def _fill(value, ids):
    if isinstance(value, str):
        return ids.get(value.strip("{}"), value) if value.startswith("{") else value
    if isinstance(value, dict):
        return {key: _fill(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, ids) for item in value]
    return value


@pytest.mark.parametrize("known", KNOWN, ids=lambda known: known.id)
def test_known_requests_match_the_schema(known, api_key, succeeded_charge):
    create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=1_000))  # so a refund exists
    a_few_days_of_books()  # and the provider's balance transactions and payouts
    refund = Refund.objects.order_by("-created_at").first()
    event = Event.objects.order_by("-created_at").first()
    assert refund is not None and event is not None
    ids = {"charge": succeeded_charge.id, "refund": refund.id, "event": event.id}
    headers = {}
    if known.auth == "key":
        headers["Authorization"] = f"Bearer {api_key}"
    elif known.auth == "read-only":
        headers["Authorization"] = f"Bearer {create_api_key(name='ro', read_only=True)[1]}"
    body = {}
    if known.body is not None:
        body = {"body": _fill(known.body, ids), "media_type": known.media_type}
    case = schema[known.path][known.method].Case(
        path_parameters=_fill(known.path_parameters, ids), query=_fill(known.query, ids), **body
    )

    response = case.call(headers=headers)

    assert response.status_code == known.status, response.content[:500]
    case.validate_response(response, checks=ALL_CHECKS, headers=headers)


@pytest.mark.parametrize(
    ("media_type", "body", "status"),
    [
        ("text/plain", "charge=ch_x", 415),
        (FORM, "charge=ch_x&metadata[k]=" + "v" * 70_000, 413),
    ],
    ids=["415-unsupported-media-type", "413-body-too-large"],
)
def test_refusals_of_the_body_itself_are_documented(auth, media_type, body, status):
    case = schema["/v1/refunds"]["POST"].Case()

    response = case.call(headers={**auth, "Content-Type": media_type}, data=body.encode())

    assert response.status_code == status
    case.validate_response(response, checks=[openapi_checks.status_code_conformance])


def test_the_schema_documents_api_key_auth():
    raw = schema.raw_schema
    schemes = raw.get("components", {}).get("securitySchemes", {})
    assert any(s.get("scheme", "").lower() == "bearer" for s in schemes.values())
    for path_item in raw["paths"].values():
        for operation in path_item.values():
            assert operation.get("security") or raw.get("security")
