"""A metadata key with a bidirectional control character in it (U+202A to U+202E, U+2066
to U+2069, U+200E, U+200F, U+061C) is refused with Stripe's 400 and changes nothing, on
every path that takes metadata: charges and refunds created, refunds and webhook endpoints
created and updated (services/validation.py: validate_metadata), and imported charges.
Keys in right-to-left scripts, without the controls, are still keys."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command

from ledger_app.models import Charge, Event, LedgerEntry, Refund, WebhookEndpoint
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"
BIDI = [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True  # the endpoint's URL is not what is tested


def rows() -> tuple[int, ...]:
    return tuple(
        model.objects.count() for model in (Charge, Refund, LedgerEntry, Event, WebhookEndpoint)
    )


def post(api, path: str, body: dict):
    return api.post(path, json.dumps(body), content_type="application/json")


def refused_as_metadata(response) -> bool:
    error = response.json().get("error", {})
    return (
        response.status_code == 400
        and error.get("type") == "invalid_request_error"
        and error.get("param") == "metadata"
        and "bidirectional control" in error.get("message", "")
    )


def key_with(control: str) -> str:
    return f"order{control}di"  # shows as "orderid" with its end reversed, or as "orderid"


@pytest.mark.parametrize("control", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
class TestEveryPathThatTakesMetadata:
    def test_creating_a_charge(self, api, control):
        before = rows()

        response = post(
            api,
            "/v1/charges",
            {"amount": 500, "currency": "usd", "metadata": {key_with(control): "1"}},
        )

        assert refused_as_metadata(response), response.content
        assert rows() == before

    def test_creating_a_refund(self, api, control):
        charge = ChargeFactory(amount=1_000)
        before = rows()

        response = post(
            api, "/v1/refunds", {"charge": charge.pk, "metadata": {key_with(control): "1"}}
        )

        assert refused_as_metadata(response), response.content
        assert rows() == before

    def test_updating_a_refund(self, api, control):
        charge = ChargeFactory(amount=1_000)
        made = post(api, "/v1/refunds", {"charge": charge.pk, "amount": 100}).json()
        before = rows()

        response = post(api, f"/v1/refunds/{made['id']}", {"metadata": {key_with(control): "1"}})

        assert refused_as_metadata(response), response.content
        assert rows() == before and Refund.objects.get().metadata == {}

    def test_creating_a_webhook_endpoint(self, api, control):
        before = rows()

        response = post(
            api,
            "/v1/webhook_endpoints",
            {
                "url": "https://127.0.0.1/h",
                "enabled_events": ["*"],
                "metadata": {key_with(control): "1"},
            },
        )

        assert refused_as_metadata(response), response.content
        assert rows() == before

    def test_updating_a_webhook_endpoint(self, api, control):
        made = post(
            api, "/v1/webhook_endpoints", {"url": "https://127.0.0.1/h", "enabled_events": ["*"]}
        ).json()
        before = rows()

        response = api.post(
            f"/v1/webhook_endpoints/{made['id']}",
            f"metadata[{key_with(control)}]=1",
            content_type=FORM,
        )

        assert refused_as_metadata(response), response.content
        assert rows() == before and WebhookEndpoint.objects.get().metadata == {}

    def test_importing_a_stripe_export(self, tmp_path, control):
        path = tmp_path / "unified_payments.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                [
                    "id",
                    "Created date (UTC)",
                    "Amount",
                    "Amount Refunded",
                    "Currency",
                    "Status",
                    f"{key_with(control)} (metadata)",
                ]
            )
            writer.writerow(
                ["ch_bidiKey000001", "2024-01-31 12:34:56", "12.50", "0.00", "usd", "Paid", "A-1"]
            )
        out, err = io.StringIO(), io.StringIO()

        with pytest.raises(CommandError) as refused:
            call_command("import_charges", str(path), "--format", "stripe", stdout=out, stderr=err)

        assert refused.value.returncode == 1
        assert "invalid_metadata" in err.getvalue() + str(refused.value)
        assert Charge.objects.count() == 0


class TestWhatIsStillAKey:
    def test_keys_in_right_to_left_scripts_and_controls_in_values_are_kept(self, api):
        charge = ChargeFactory(amount=1_000)
        metadata = {"رقم_الطلب": "A-1", "הזמנה": "\u202eB-2"}

        response = post(api, "/v1/refunds", {"charge": charge.pk, "metadata": metadata})

        assert response.status_code == 200, response.content
        assert Refund.objects.get().metadata == metadata

    def test_an_amount_with_leading_zeros_is_its_decimal_number(self, api):
        # As Stripe's own stripe-mock reads form integers (Go's strconv.Atoi): "0100" is 100,
        # never octal 64.
        charge = ChargeFactory(amount=1_000)

        response = api.post("/v1/refunds", f"charge={charge.pk}&amount=0100", content_type=FORM)

        assert response.status_code == 200, response.content
        assert response.json()["amount"] == 100
