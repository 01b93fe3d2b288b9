"""POST /v1/charges refuses an amount above its currency's ceiling: a 400 in Stripe's
envelope with code amount_too_large on param amount, and nothing written, not even the
Idempotency-Key (so the corrected request can use it)."""

import json

import pytest

from ledger_app.models import Charge, IdempotencyRecord
from tests.invariants import rows_written

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"


@pytest.fixture(autouse=True)
def _instant_provider(settings):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0


def charge(api, body: str, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post("/v1/charges", body, content_type=FORM, **headers)


def test_one_cent_over_stripes_usd_ceiling_is_a_400_and_writes_nothing(api):
    before = rows_written()

    refused = charge(api, "amount=100000000&currency=usd", key="order-A-17")

    assert refused.status_code == 400
    assert refused.json() == {
        "error": {
            "type": "invalid_request_error",
            "code": "amount_too_large",
            "param": "amount",
            "message": "Amount must be at most $999,999.99 (99999999 minor units) for USD.",
        }
    }
    assert rows_written() == before


def test_the_same_key_then_makes_the_corrected_charge(api):
    charge(api, "amount=100000000&currency=usd", key="order-A-17")

    corrected = charge(api, "amount=99999999&currency=usd", key="order-A-17")

    assert corrected.status_code == 200, corrected.content
    assert not corrected.has_header("Idempotent-Replayed")
    assert corrected.json()["amount"] == 99_999_999
    assert IdempotencyRecord.objects.get(key="order-A-17").charge_id == corrected.json()["id"]


def test_the_probes_charge_of_nine_quintillion_cents_is_refused(api):
    body = json.dumps({"amount": 9_000_000_000_000_000_000, "currency": "usd"})

    refused = api.post("/v1/charges", body, content_type="application/json")

    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "amount_too_large"
    assert Charge.objects.count() == 0


@pytest.mark.parametrize(
    ("currency", "ceiling"), [("usd", 99_999_999), ("jpy", 99_999_999), ("idr", 999_999_999_999)]
)
def test_the_ceiling_itself_is_accepted_and_one_more_is_not(api, currency, ceiling):
    at = charge(api, f"amount={ceiling}&currency={currency}")
    over = charge(api, f"amount={ceiling + 1}&currency={currency}")

    assert at.status_code == 200 and at.json()["amount"] == ceiling
    assert over.status_code == 400
    assert (over.json()["error"]["code"], over.json()["error"]["param"]) == (
        "amount_too_large",
        "amount",
    )
    assert Charge.objects.count() == 1


def test_the_ceilings_setting_is_what_the_api_enforces(api, settings):
    settings.AMOUNT_CEILINGS = {"usd": 5_000_000}

    refused = charge(api, "amount=5000001&currency=usd")

    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "Amount must be at most $50,000.00 (5000000 minor units) for USD."
    )
    assert charge(api, "amount=5000000&currency=usd").status_code == 200
