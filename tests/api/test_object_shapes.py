"""Objects shaped as Stripe's: every field Stripe's own object always shows is there (null,
false or empty where it means nothing here), so code written against Stripe reads it
unchanged. The field lists are Stripe's published schema
(stripe_reference/stripe_fields_2026.json, which says from which commit)."""

import json

import pytest
import stripe

from ledger_app import api_versions
from ledger_app.models import Charge, Event
from tests.api.stripe_conformance import REFERENCE, always_shown
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def charge(stripe_client):
    return stripe_client.v1.charges.create(params={"amount": 10_000, "currency": "usd"})


@pytest.fixture
def refund(stripe_client, charge):
    return stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})


def missing(name: str, obj: stripe.StripeObject) -> set[str]:
    """The fields Stripe always shows on an object `name` (required, or nullable) that
    `obj` lacks."""
    return always_shown(name) - set(obj.to_dict())


class TestEveryStripeField:
    def test_refund_has_every_field(self, stripe_client, refund):
        fetched = stripe_client.v1.refunds.retrieve(refund.id)

        assert missing("refund", refund) == set() and missing("refund", fetched) == set()

    def test_charge_has_every_field(self, stripe_client, charge):
        fetched = stripe_client.v1.charges.retrieve(charge.id)
        listed = stripe_client.v1.charges.list().data[0]

        assert missing("charge", charge) == set()
        assert missing("charge", fetched) == missing("charge", listed) == set()

    def test_event_has_every_field_and_its_object_too(self, stripe_client, refund):
        events = {e.type: e for e in stripe_client.v1.events.list(params={"limit": 100}).data}

        assert set(events) >= {"charge.succeeded", "refund.created", "charge.refunded"}
        for event in events.values():
            assert missing("event", event) == set(), event.type
            name = event.data.object.object
            assert missing(name, event.data.object) == set(), event.type

    def test_webhook_endpoint_has_every_field(self, stripe_client):
        """Depends on /v1/webhook_endpoints (ledger_app/api/webhook_endpoints.py)."""
        made = stripe_client.v1.webhook_endpoints.create(
            params={"url": "https://8.8.8.8/hooks", "enabled_events": ["charge.succeeded"]}
        )
        fetched = stripe_client.v1.webhook_endpoints.retrieve(made.id)

        assert missing("webhook_endpoint", made) == set()
        assert missing("webhook_endpoint", fetched) == set()

    def test_the_reference_says_where_it_came_from(self):
        assert "stripe/openapi" in REFERENCE["source"] and "2026-07-29" in REFERENCE["source"]
        sizes = {name: len(always_shown(name)) for name in ("refund", "charge", "event")}
        assert sizes == {"refund": 17, "charge": 41, "event": 9}


class TestValuesOfFieldsThatMeanNothingHere:
    def test_code_written_for_stripe_reads_them(self, stripe_client, refund, charge):
        fetched = stripe_client.v1.charges.retrieve(charge.id)

        assert refund.payment_intent == charge.payment_intent  # its charge's
        assert refund.balance_transaction is None
        assert "failure_reason" not in refund
        assert refund.destination_details.type == "card"  # its acquirer reference to come
        assert refund.destination_details.card.reference_status == "pending"
        assert "pending_reason" not in refund  # succeeded
        assert (fetched.livemode, fetched.disputed, fetched.fraud_details.to_dict()) == (
            False,
            False,
            {},
        )
        assert fetched.billing_details.address.country is None
        assert fetched.billing_details.name is None
        assert fetched.payment_intent.startswith("pi_") and fetched.outcome is None
        assert fetched.failure_code is None and fetched.failure_message is None
        assert "refunds" not in fetched  # the current API version: only when expanded

    def test_a_declined_charge_is_a_card_error_naming_the_charge(self, stripe_client):
        params = {"amount": 500, "currency": "usd", "metadata": {"simulate_charge": "decline"}}
        with pytest.raises(stripe.CardError) as raised:
            stripe_client.v1.charges.create(params=params, options={"idempotency_key": "c-1"})
        with pytest.raises(stripe.CardError) as replayed:
            stripe_client.v1.charges.create(params=params, options={"idempotency_key": "c-1"})

        error, again = raised.value, replayed.value
        assert error.error is not None and again.error is not None and again.headers is not None
        assert (error.http_status, error.code) == (402, "card_declined")
        assert error.error.decline_code == "simulated_decline"
        assert error.error.charge is not None and error.error.charge.startswith("ch_")
        assert again.error.charge == error.error.charge  # the same charge, once
        assert again.headers.get("idempotent-replayed") == "true"
        assert Charge.objects.count() == 1
        declined = stripe_client.v1.charges.retrieve(error.error.charge)
        assert declined.status == "failed" and declined.paid is False
        assert declined.failure_code == "simulated_decline"
        assert declined.failure_message == "simulated_decline"
        events = stripe_client.v1.events.list(params={"type": "charge.failed"}).data
        assert [e.data.object.failure_code for e in events] == ["simulated_decline"]

    def test_a_charge_recorded_failed_without_a_code_has_none(self, stripe_client):
        failed = ChargeFactory(status="failed")

        fetched = stripe_client.v1.charges.retrieve(failed.id)

        assert fetched.status == "failed" and fetched.failure_code is None


class TestChargeRefunds:
    """Before API version 2022-11-15 a charge embeds its refunds (legacy_client); from it
    on, only when expanded."""

    def test_current_versions_show_them_only_when_expanded(self, stripe_client, charge):
        stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})

        fetched = stripe_client.v1.charges.retrieve(charge.id)
        listed = stripe_client.v1.charges.list().data[0]
        expanded = stripe_client.v1.charges.retrieve(charge.id, params={"expand": ["refunds"]})

        assert "refunds" not in fetched and "refunds" not in listed
        assert fetched.last_response.headers["Stripe-Version"] == stripe.api_version
        assert len(expanded.refunds.data) == 1

    def test_the_ten_newest_then_the_url_pages_on(self, legacy_client, charge):
        stripe_client = legacy_client
        made = [
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100}).id
            for _ in range(12)
        ]

        fetched = stripe_client.v1.charges.retrieve(charge.id)
        everything = [r.id for r in fetched.refunds.auto_paging_iter()]
        expanded = stripe_client.v1.charges.retrieve(charge.id, params={"expand": ["refunds"]})

        newest_first = list(reversed(made))
        assert [r.id for r in fetched.refunds.data] == newest_first[:10]
        assert fetched.refunds.has_more is True
        assert fetched.refunds.url == f"/v1/charges/{charge.id}/refunds"
        assert everything == newest_first
        assert [r.id for r in expanded.refunds.data] == newest_first
        assert expanded.refunds.has_more is False

    def test_a_charge_without_refunds_has_an_empty_list(self, legacy_client, charge):
        charge = legacy_client.v1.charges.retrieve(charge.id)
        assert charge.refunds.to_dict() == {
            "object": "list",
            "data": [],
            "has_more": False,
            "url": f"/v1/charges/{charge.id}/refunds",
        }

    def test_the_charge_refunds_list_pages_like_the_others(self, legacy_client, charge):
        stripe_client = legacy_client
        made = [
            stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100}).id
            for _ in range(3)
        ]
        url = f"/v1/charges/{charge.id}/refunds"

        page = stripe_client.v1.charges.retrieve(charge.id).refunds.list(limit=2)
        rest = stripe_client.raw_request("get", url, starting_after=page.data[-1].id)

        assert [r.id for r in page.data] == [made[2], made[1]] and page.has_more is True
        assert [r["id"] for r in json.loads(rest.body)["data"]] == [made[0]]
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.raw_request("get", "/v1/charges/ch_nope/refunds")
        assert (error.value.http_status, error.value.code) == (404, "resource_missing")


def test_a_page_of_charges_fetches_their_refunds_in_one_query(api, django_assert_max_num_queries):
    for _ in range(5):
        charge = ChargeFactory()
        response = api.post(
            "/v1/refunds",
            f"charge={charge.id}&amount=100",
            content_type="application/x-www-form-urlencoded",
        )
        assert response.status_code == 200

    # the API key, the rate counter, the page, the refunds of all its charges (not one
    # query per charge)
    with django_assert_max_num_queries(4):
        listing = api.get("/v1/charges?limit=5", HTTP_STRIPE_VERSION=api_versions.LEGACY).json()

    assert [len(c["refunds"]["data"]) for c in listing["data"]] == [1] * 5
    assert Event.objects.filter(type="refund.created").count() == 5
