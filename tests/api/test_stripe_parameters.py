"""docs/api.md's table of Stripe's parameters ("Stripe's parameters"), held to what the API
does. For every endpoint Stripe's spec lists (stripe_reference/stripe_fields_2026.json,
`params`), the docs name each of Stripe's parameters exactly once, as `taken` or
`refused`; each is then sent, alone beside the endpoint's required ones, with a value
Stripe would accept:

- `taken`: the request succeeds (2xx);
- `refused`: 400 `parameter_unknown` naming it;
- `expand` where nothing expands: 400 `parameter_invalid` naming `expand` (the parameter
  is known; the field asked for cannot be expanded).

So the docs cannot claim a parameter the API refuses, or leave out one it takes."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from ledger_app import api_versions
from ledger_app.access.api_keys import PREFIX_LENGTH
from ledger_app.models import ApiKey, Event, RefundLimit
from tests.api.books_rows import balance_transaction, payout
from tests.api.stripe_conformance import PARAMS
from tests.factories import ChargeFactory
from tests.invariants import rows_written

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("inline_dispatch", "ledger_invariants"),
]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ENDPOINT = re.compile(r"^### `((?:GET|POST|DELETE) /v1/\S+)`$")
ROW = re.compile(r"^\| `([a-z_]+)` \| (taken|refused)\b.*\|$")
FORM = "application/x-www-form-urlencoded"

# A value Stripe would accept, as the official client sends it: (form key, value).
SAMPLES = {
    "amount": ("amount", "1"),
    "api_version": ("api_version", api_versions.LATEST),
    "arrival_date": ("arrival_date[gte]", "0"),
    "capture": ("capture", "true"),
    "charge": ("charge", "{charge}"),
    "connect": ("connect", "false"),
    "created": ("created[gte]", "0"),
    "currency": ("currency", "usd"),
    "customer": ("customer", "cus_sample"),
    "delivery_success": ("delivery_success", "true"),
    "description": ("description", "sample"),
    "disabled": ("disabled", "false"),
    "enabled_events": ("enabled_events[]", "charge.succeeded"),
    "ending_before": ("ending_before", "{first}"),
    "instructions_email": ("instructions_email", "buyer@example.com"),
    "limit": ("limit", "1"),
    "metadata": ("metadata[k]", "v"),
    "origin": ("origin", "customer_balance"),
    "payment_intent": ("payment_intent", "{payment_intent}"),
    "payout": ("payout", "{payout}"),
    "radar_options": ("radar_options[session]", "rses_1"),
    "reason": ("reason", "requested_by_customer"),
    "receipt_email": ("receipt_email", "buyer@example.com"),
    "refund_application_fee": ("refund_application_fee", "false"),
    "reverse_transfer": ("reverse_transfer", "false"),
    "shipping": ("shipping[name]", "Buyer"),
    "source": ("source", "tok_visa"),
    "starting_after": ("starting_after", "{first}"),
    "status": ("status", "paid"),
    "transfer_data": ("transfer_data[destination]", "acct_1"),
    "type": ("type", "charge.succeeded"),
    "types": ("types[]", "charge.succeeded"),
    "url": ("url", "https://8.8.8.8/hooks"),
}
# Where one endpoint's parameter takes other values than another's of the same name.
SAMPLES_OF = {("GET /v1/balance_transactions", "type"): ("type", "charge")}
EXPANDS = {  # an expansion each endpoint takes
    "GET /v1/charges": "data.payment_intent",
    "GET /v1/refunds": "data.charge",
    "GET /v1/refunds/{refund}": "charge",
    "POST /v1/charges": "payment_intent",
    "POST /v1/refunds": "charge",
    "POST /v1/refunds/{refund}": "charge",
    "POST /v1/refunds/{refund}/cancel": "charge",
}
# What each endpoint needs besides the parameter under test.
REQUIRED = {
    "POST /v1/charges": {"amount": "100", "currency": "usd"},
    "POST /v1/refunds": {"charge": "{charge}", "amount": "1"},
    "POST /v1/webhook_endpoints": {
        "url": "https://8.8.8.8/hooks",
        "enabled_events[]": "charge.succeeded",
    },
}
# The object whose id a list's cursor takes, by list.
FIRST = {
    "GET /v1/charges": "charge",
    "GET /v1/refunds": "refund",
    "GET /v1/events": "event",
    "GET /v1/webhook_endpoints": "webhook_endpoint",
    "GET /v1/balance_transactions": "balance_transaction",
    "GET /v1/payouts": "payout",
}


def documented() -> dict[str, dict[str, str]]:
    """Endpoint to {parameter: "taken" or "refused"}, from docs/api.md."""
    section = DOCS.read_text().split("## Stripe's parameters", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in section.splitlines():
        if match := ENDPOINT.match(line):
            current = tables.setdefault(match[1], {})
        elif (match := ROW.match(line)) and current is not None:
            assert match[1] not in current, f"{match[1]} twice"
            current[match[1]] = match[2]
    return tables


def test_the_docs_list_every_stripe_parameter_of_every_endpoint_once():
    tables = documented()
    assert set(tables) == set(PARAMS)
    for endpoint, names in PARAMS.items():
        assert set(tables[endpoint]) == set(names), endpoint


def test_counts_in_the_docs_match_the_tables():
    tables = documented()
    taken = sum(1 for rows in tables.values() for verdict in rows.values() if verdict == "taken")
    total = sum(len(rows) for rows in tables.values())
    assert f"{taken} of Stripe's {total} parameters" in DOCS.read_text()


@pytest.fixture
def objects(api):
    """One of each object the endpoints name, made through the API; and a balance transaction
    and a payout, as sync_provider mirrors them."""
    charge = api.post(
        "/v1/charges", urlencode({"amount": 1_000_000, "currency": "usd"}), content_type=FORM
    ).json()
    refund = api.post(
        "/v1/refunds", urlencode({"charge": charge["id"], "amount": 1}), content_type=FORM
    ).json()
    endpoint = api.post(
        "/v1/webhook_endpoints",
        urlencode({"url": "https://8.8.8.8/hooks", "enabled_events[]": "*"}),
        content_type=FORM,
    ).json()
    return {
        "charge": charge["id"],
        "payment_intent": charge["payment_intent"],
        "refund": refund["id"],
        "event": Event.objects.latest("created_at").id,
        "webhook_endpoint": endpoint["id"],
        "balance_transaction": balance_transaction("txn_params", payout="po_params").pk,
        "payout": payout("po_params").pk,
    }


def awaiting_approval(api, api_key, charge_id: str) -> str:
    """A refund above the key's own limit: it waits for approval, and can be canceled."""
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.get_or_create(
        api_key=key, currency="usd", defaults={"per_refund": 5, "per_day": 1_000_000}
    )
    made = api.post(
        "/v1/refunds", urlencode({"charge": charge_id, "amount": 10}), content_type=FORM
    ).json()
    assert made["ledger_status"] == "awaiting_approval", made
    return made["id"]


CASES = [
    (endpoint, name, verdict)
    for endpoint, rows in sorted(documented().items())
    for name, verdict in sorted(rows.items())
]


@pytest.mark.parametrize(("endpoint", "name", "verdict"), CASES)
def test_each_documented_parameter_is_handled_as_documented(
    api, api_key, objects, endpoint, name, verdict
):
    method, template = endpoint.split(" ")
    values = dict(objects)
    if endpoint == "POST /v1/refunds/{refund}/cancel":
        values["refund"] = awaiting_approval(api, api_key, objects["charge"])
    values["first"] = objects.get(FIRST.get(endpoint, ""), "")
    # the paths Stripe's spec names {id}: an event's and a balance transaction's
    values["id"] = objects["balance_transaction" if "balance_" in endpoint else "event"]
    path = re.sub(r"\{(\w+)\}", lambda m: values[m[1]], template)
    params = dict(REQUIRED.get(endpoint, {}))
    if name == "payment_intent":
        params.pop("charge", None)
    key, value = SAMPLES_OF.get((endpoint, name)) or SAMPLES.get(name, (name, "x"))
    if name == "expand":
        key, value = "expand[]", EXPANDS.get(endpoint, "data")
    params[key] = value
    params = {k: v.format(**values) for k, v in params.items()}

    if method == "GET":
        response = api.get(path, params)
    else:
        response = api.post(path, urlencode(params), content_type=FORM)

    body = response.json()
    if name == "expand" and endpoint not in EXPANDS:
        assert response.status_code == 400, body
        assert (body["error"]["code"], body["error"]["param"]) == ("parameter_invalid", "expand")
    elif verdict == "taken":
        assert response.status_code < 300, body
    else:
        assert response.status_code == 400, body
        assert body["error"]["code"] == "parameter_unknown", body
        assert body["error"]["param"].split("[")[0] == name, body


def test_customer_filters_charges_to_that_customers(api):
    mine = {ChargeFactory(customer="cus_a").id for _ in range(2)}
    ChargeFactory(customer="cus_b")
    ChargeFactory(customer="")
    listed = api.get("/v1/charges", {"customer": "cus_a", "limit": 100}).json()["data"]
    assert {charge["id"] for charge in listed} == mine
    everyone = api.get("/v1/charges", {"customer": "", "limit": 100}).json()["data"]
    assert len(everyone) == 4


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/charges", {"amount": "100", "currency": "usd", "capture": "false"}, "capture"),
        (
            "/v1/webhook_endpoints",
            {"url": "https://8.8.8.8/h", "enabled_events[]": "*", "connect": "true"},
            "connect",
        ),
    ],
)
def test_the_value_that_would_need_what_the_back_office_lacks_is_refused(api, path, body, param):
    before = rows_written()
    response = api.post(path, urlencode(body), content_type=FORM)
    assert response.status_code == 400
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == (
        "parameter_invalid",
        param,
    )
    assert rows_written() == before
