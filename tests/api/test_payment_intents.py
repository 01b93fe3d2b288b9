"""PaymentIntents: every charge made here belongs to one (pi_...), a refund can name the
PaymentIntent instead of the charge (Stripe's recommended path), lists filter by it, and
GET /v1/payment_intents/{id} shows what the ledger knows of it."""

import json

import pytest
import stripe

from ledger_app.charges.services import record_charge
from ledger_app.models import Charge, IdempotencyRecord, Refund
from tests.api.stripe_fields import problems
from tests.factories import ChargeFactory

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
JSON = "application/json"


def post(api, path, body, **headers):
    return api.post(path, json.dumps(body), content_type=JSON, **headers)


def nothing_written(before_refunds: int) -> bool:
    return (
        Refund.objects.count() == before_refunds
        and not IdempotencyRecord.objects.filter(operation="refund.create").exists()
    )


@pytest.mark.django_db(transaction=True)
def test_the_stripe_client_refunds_by_payment_intent(stripe_client):
    charge = stripe_client.v1.charges.create(params={"amount": 2_000, "currency": "usd"})
    assert charge.payment_intent.startswith("pi_")

    refund = stripe_client.v1.refunds.create(
        params={"payment_intent": charge.payment_intent, "amount": 500},
        options={"idempotency_key": "order-9-refund-1"},
    )
    again = stripe_client.v1.refunds.create(
        params={"payment_intent": charge.payment_intent, "amount": 500},
        options={"idempotency_key": "order-9-refund-1"},
    )

    assert (refund.charge, refund.payment_intent, refund.status) == (
        charge.id,
        charge.payment_intent,
        "succeeded",
    )
    assert again.id == refund.id
    listed = stripe_client.v1.refunds.list(params={"payment_intent": charge.payment_intent})
    assert [r.id for r in listed.data] == [refund.id]
    intent = stripe_client.v1.payment_intents.retrieve(charge.payment_intent)
    assert (intent.id, intent.latest_charge, intent.status, intent.amount) == (
        charge.payment_intent,
        charge.id,
        "succeeded",
        2_000,
    )
    with pytest.raises(stripe.InvalidRequestError) as missing:
        stripe_client.v1.payment_intents.retrieve("pi_nothingHere")
    assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")


@pytest.mark.django_db
class TestRefundByPaymentIntent:
    def test_it_refunds_the_intents_succeeded_charge_not_its_declined_one(self, api):
        declined = record_charge(amount=1_000, currency="usd", status="failed")
        paid = record_charge(amount=1_000, currency="usd", payment_intent=declined.payment_intent)

        body = post(api, "/v1/refunds", {"payment_intent": paid.payment_intent}).json()

        assert (body["charge"], body["amount"]) == (paid.id, 1_000)
        assert api.get(f"/v1/payment_intents/{paid.payment_intent}").json()["latest_charge"] == (
            paid.id
        )

    def test_a_declined_intent_is_not_refundable(self, api):
        declined = record_charge(amount=1_000, currency="usd", status="failed")

        response = post(api, "/v1/refunds", {"payment_intent": declined.payment_intent})

        assert response.status_code == 400
        assert response.json()["error"]["code"] == "charge_not_refundable"
        intent = api.get(f"/v1/payment_intents/{declined.payment_intent}").json()
        assert intent["status"] == "requires_payment_method"

    def test_both_given_and_agreeing_is_the_charge(self, api):
        charge = ChargeFactory(amount=1_000)

        body = post(
            api,
            "/v1/refunds",
            {"charge": charge.id, "payment_intent": charge.payment_intent, "amount": 100},
        ).json()

        assert body["charge"] == charge.id and body["status"] == "succeeded"

    def test_both_given_and_disagreeing_is_refused_and_writes_nothing(self, api):
        mine, other = ChargeFactory(amount=1_000), ChargeFactory(amount=1_000)

        response = post(
            api,
            "/v1/refunds",
            {"charge": mine.id, "payment_intent": other.payment_intent, "amount": 100},
            HTTP_IDEMPOTENCY_KEY="mixed-up-1",
        )

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("parameter_invalid", "payment_intent")
        assert nothing_written(0)
        assert Charge.objects.get(pk=mine.pk).amount_refunded == 0

    @pytest.mark.parametrize("intent", ["pi_nothingHere", "pi_", "ch_123", "pi_a b", "pi_\u00e9"])
    def test_an_unknown_intent_is_resource_missing_and_binds_no_key(self, api, intent):
        ChargeFactory()

        response = post(
            api, "/v1/refunds", {"payment_intent": intent}, HTTP_IDEMPOTENCY_KEY="unknown-pi-1"
        )

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("resource_missing", "payment_intent")
        assert nothing_written(0)

    def test_neither_charge_nor_intent_is_parameter_missing(self, api):
        response = post(api, "/v1/refunds", {"amount": 100})

        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "parameter_missing"
        assert "payment_intent or charge" in error["message"]

    def test_the_key_is_bound_to_how_the_charge_was_named(self, api):
        charge = ChargeFactory(amount=1_000)
        post(api, "/v1/refunds", {"charge": charge.id, "amount": 100}, HTTP_IDEMPOTENCY_KEY="k-1")

        response = post(
            api,
            "/v1/refunds",
            {"payment_intent": charge.payment_intent, "amount": 100},
            HTTP_IDEMPOTENCY_KEY="k-1",
        )

        assert response.status_code == 400
        assert response.json()["error"]["code"] == "idempotency_key_reused"
        assert Refund.objects.count() == 1


@pytest.mark.django_db
class TestListsAndLookups:
    def test_lists_filter_by_payment_intent(self, api):
        first, second = ChargeFactory(amount=1_000), ChargeFactory(amount=1_000)
        for charge in (first, second):
            post(api, "/v1/refunds", {"charge": charge.id, "amount": 100})

        refunds = api.get("/v1/refunds", {"payment_intent": first.payment_intent}).json()
        charges = api.get("/v1/charges", {"payment_intent": second.payment_intent}).json()
        nothing = api.get("/v1/refunds", {"payment_intent": "pi_nothingHere"}).json()

        assert [r["charge"] for r in refunds["data"]] == [first.id]
        assert [r["payment_intent"] for r in refunds["data"]] == [first.payment_intent]
        assert [c["id"] for c in charges["data"]] == [second.id]
        assert nothing["data"] == []

    def test_a_charge_made_without_one_shows_null(self, api):
        charge = record_charge(amount=1_000, currency="usd", payment_intent="")

        assert api.get(f"/v1/charges/{charge.id}").json()["payment_intent"] is None
        refund = post(api, "/v1/refunds", {"charge": charge.id, "amount": 1}).json()
        assert refund["payment_intent"] is None

    def test_the_intent_shows_what_the_ledger_knows(self, api):
        charge = record_charge(amount=1_500, currency="eur", metadata={"order": "A-1"})

        intent = api.get(f"/v1/payment_intents/{charge.payment_intent}").json()

        known = {name: intent[name] for name in intent if intent[name] is not None}
        assert known == {
            "id": charge.payment_intent,
            "object": "payment_intent",
            "amount": 1_500,
            "amount_capturable": 0,
            "amount_received": 1_500,
            "capture_method": "automatic",
            "confirmation_method": "automatic",
            "created": int(charge.created_at.timestamp()),
            "currency": "eur",
            "latest_charge": charge.id,
            "livemode": False,
            "metadata": {"order": "A-1"},
            "payment_method_types": ["card"],
            "status": "succeeded",
        }
        assert problems(intent, "payment_intent") == []  # every field of Stripe's
        assert api.get(f"/v1/payment_intents/{charge.payment_intent}?x=1").status_code == 400
