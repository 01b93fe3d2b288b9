"""Every hostile input of tests/hostile_inputs.json that an API client can send, against
POST /v1/refunds: a 4xx in Stripe's envelope with the catalogue's code (never a 5xx) and
nothing written, or, for hostile-looking text that is a legitimate request, one refund
whose text the admin shows escaped."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from tests import hostile

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


def _form(pairs: list[tuple[str, str]]) -> bytes:
    def enc(text: str) -> str:
        return quote(text.encode("utf-8", "surrogatepass"), safe="[]")

    return "&".join(f"{enc(k)}={enc(v)}" for k, v in pairs).encode("ascii")


def build(case: hostile.Case, charge_id: str) -> tuple[bytes, str, dict[str, str]]:
    """(body, content type, extra headers) for one case."""
    spec, field, value = case.expect, case.field, case.value
    headers: dict[str, str] = {}
    via = spec.get("as", "form")
    if via == "raw_form" and "fields" in spec:
        pairs = [("charge", charge_id), ("amount", case.amount)]
        pairs += [(f"x{i}", "v") for i in range(spec["fields"] - len(pairs))]
        return _form(pairs), FORM, headers
    if via in ("raw_form", "raw_json"):
        body = hostile.expand(spec["body"]).replace("{charge}", charge_id)
        content_type = spec.get("content_type", FORM if via == "raw_form" else JSON)
        return body.encode("utf-8", "surrogatepass"), content_type, headers
    if field == "idempotency_key":
        headers["HTTP_IDEMPOTENCY_KEY"] = value
    if via == "json":
        amount: Any = int(case.amount) if case.amount.isdigit() else case.amount
        params: dict[str, Any] = {"charge": charge_id, "amount": amount}
        if field in ("amount", "charge", "reason", "note", "metadata"):
            params[field] = value
        return json.dumps(params, ensure_ascii=True).encode(), JSON, headers
    pairs = [("charge", charge_id), ("amount", case.amount)]
    if field == "amount":
        pairs[1] = ("amount", value)
    elif field == "charge":
        pairs[0] = ("charge", value)
    elif field in ("reason", "note"):
        pairs.append((field, value))
    elif field == "metadata":
        pairs += [(f"metadata[{k}]", v) for k, v in value.items()]
    return _form(pairs), FORM, headers


@pytest.mark.parametrize("case", hostile.cases("api"))
def test_hostile_input_on_the_api(api, settings, case):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    api.raise_request_exception = False  # a 500 must show up as a response here
    charge = hostile.target_charge(case)
    body, content_type, headers = build(case, charge.pk)
    before = hostile.snapshot(charge)

    response = api.generic("POST", "/v1/refunds", body, content_type=content_type, **headers)
    hostile.tried()

    assert response.status_code < 500, response.content[:300]
    payload = response.json()
    if case.accepted:
        assert response.status_code == 200, payload
        assert payload["object"] == "refund" and payload["amount"] == 100
        refund = hostile.assert_one_refund_written(charge, before, 100)
        hostile.assert_admin_pages_escape(hostile.staff_client(), case, refund)
        return
    expected = case.expect
    assert response.status_code == expected.get("status", 400), payload
    assert set(payload) == {"error"}, payload
    assert payload["error"]["code"] == expected["code"], payload
    if "param" in expected:
        assert payload["error"].get("param") == expected["param"], payload
    hostile.assert_nothing_written(charge, before)
