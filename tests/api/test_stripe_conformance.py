"""Every object the API returns, in every status we can produce, against Stripe's published
schema (stripe_conformance.py; a balance transaction against stripe_fields.py's reference,
a payout against the stripe package's declared fields): no field Stripe's object lacks
(beyond our documented extensions), every required field, and only Stripe's values in its
enums. Also: every
parameter Stripe lists for an endpoint we serve is either accepted or on docs/api.md's
list of those we refuse (test_stripe_parameters.py holds the parameters to the docs)."""

import json

import pytest
from django.test import Client

from tests.api import stripe_fields
from tests.api.books_rows import a_few_days_of_books
from tests.api.stripe_conformance import problems
from tests.api.stripe_package_fields import package_problems

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
JSON = "application/json"


def post(api, path: str, body: dict, **headers):
    return api.post(path, json.dumps(body), content_type=JSON, **headers)


def new_charge(api, **metadata) -> dict:
    response = post(api, "/v1/charges", {"amount": 10_000, "currency": "usd", "metadata": metadata})
    return response.json()


@pytest.mark.django_db(transaction=True)
class TestEveryObjectConforms:
    def test_refunds_in_every_status(self, api, every_refund_status):
        for status, refund in every_refund_status.items():
            assert problems(refund, "refund") == [], status
            fetched = api.get(f"/v1/refunds/{refund['id']}").json()
            assert problems(fetched, "refund") == [], status
        listed = api.get("/v1/refunds", {"limit": 100}).json()
        assert problems(listed["data"][0], "refund") == []
        assert all(problems(r, "refund") == [] for r in listed["data"])

    def test_charges_in_every_status(self, api, every_refund_status):
        declined = new_charge(api, simulate_charge="decline")  # a 402 card_error
        assert problems(declined, "error") == []
        assert declined["error"]["type"] == "card_error"
        made = [
            new_charge(api),
            api.get(f"/v1/charges/{declined['error']['charge']}").json(),
            new_charge(api, simulate_charge="timeout"),
        ]
        charges = api.get("/v1/charges", {"limit": 100}).json()["data"]
        assert {c["ledger_status"] for c in charges} >= {"succeeded", "failed", "unknown"}
        for charge in [*made, *charges]:
            fetched = api.get(f"/v1/charges/{charge['id']}").json()
            assert problems(fetched, "charge") == [], fetched["id"]
            assert problems(charge, "charge") == [], charge["id"]

    def test_events_and_their_objects(self, api, every_refund_status):
        events = api.get("/v1/events", {"limit": 100}).json()["data"]
        assert {e["type"] for e in events} >= {
            "charge.succeeded",
            "charge.refunded",
            "refund.created",
            "refund.updated",
            "refund.failed",
        }
        for event in events:
            assert problems(event, "event") == [], event["type"]
            inner = event["data"]["object"]
            assert problems(inner, inner["object"]) == [], event["type"]
            # null in previous_attributes: the field was null, or left out (docs/api.md)
            previous = event["data"].get("previous_attributes") or {}
            before = {**inner, **previous}
            before = {k: v for k, v in before.items() if v is not None or inner.get(k, 0) is None}
            assert problems(before, inner["object"]) == [], event["type"]

    def test_webhook_endpoints(self, api, settings):
        made = post(
            api,
            "/v1/webhook_endpoints",
            {"url": "https://8.8.8.8/hooks", "enabled_events": ["charge.succeeded"]},
        ).json()
        fetched = api.get(f"/v1/webhook_endpoints/{made['id']}").json()
        listed = api.get("/v1/webhook_endpoints").json()["data"]

        for endpoint in (made, fetched, *listed):
            assert problems(endpoint, "webhook_endpoint") == []

    def test_balance_transactions_and_payouts(self, api):
        books = a_few_days_of_books()
        listed = api.get("/v1/balance_transactions", {"limit": 100}).json()["data"]
        payouts = api.get("/v1/payouts", {"limit": 100}).json()["data"]

        assert [bt["id"] for bt in listed] == books.moved
        for bt in listed:
            fetched = api.get(f"/v1/balance_transactions/{bt['id']}").json()
            assert stripe_fields.problems(bt, "balance_transaction") == [], bt["id"]
            assert stripe_fields.problems(fetched, "balance_transaction") == [], bt["id"]
        assert [p["id"] for p in payouts] == books.payouts
        for paid in payouts:
            fetched = api.get(f"/v1/payouts/{paid['id']}").json()
            assert package_problems(paid, "payout") == package_problems(fetched, "payout") == []

    def test_errors(self, api):
        client = Client()  # no key
        answers = [
            api.get("/v1/refunds/re_missing"),
            post(api, "/v1/refunds", {"charge": "ch_missing"}),
            post(api, "/v1/refunds", {"amount": 1}),
            api.get("/v1/charges", {"limit": 0}),
            client.get("/v1/charges"),
            client.get("/v1/charges", HTTP_AUTHORIZATION="Bearer sk_wrong"),
        ]
        for answer in answers:
            assert answer.status_code >= 400
            assert problems(answer.json(), "error") == [], answer.content


@pytest.mark.django_db
class TestEventsRecordedBeforeLedgerStatus:
    """Events written by earlier releases keep their snapshot; the API shows it in
    Stripe's values."""

    def test_an_old_unknown_refund_and_an_old_approval_show_stripes_values(self, api):
        from ledger_app.models import Event
        from tests.factories import ChargeFactory

        charge = ChargeFactory()
        old_refund = {
            "id": "re_old",
            "object": "refund",
            "amount": 100,
            "charge": charge.id,
            "created": 1767225600,
            "currency": "usd",
            "metadata": {},
            "status": "unknown",
            "pending_reason": None,
            "failure_reason": None,
            "destination_details": None,
            "reason": None,
        }
        unknown = Event.objects.create(
            type="refund.updated",
            data_object=old_refund,
            previous_attributes={"status": "pending"},
            charge=charge,
        )
        approved = Event.objects.create(
            type="refund.updated",
            data_object={**old_refund, "status": "pending", "pending_reason": "processing"},
            previous_attributes={"pending_reason": "awaiting_approval"},
            charge=charge,
        )

        shown = api.get(f"/v1/events/{unknown.id}").json()["data"]
        assert shown["object"]["status"] == "pending"
        assert shown["object"]["ledger_status"] == "unknown"
        assert "destination_details" not in shown["object"]
        assert "failure_reason" not in shown["object"]
        assert problems(shown["object"], "refund") == []
        later = api.get(f"/v1/events/{approved.id}").json()["data"]
        assert later["previous_attributes"] == {
            "ledger_status": "awaiting_approval",
            "status": "pending",
        }
