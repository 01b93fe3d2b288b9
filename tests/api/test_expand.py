"""expand[]: a refund's charge and payment_intent, a charge's refunds and payment_intent,
and `data.<field>` on lists, fetched once per page; anything else is Stripe's refusal."""

import pytest
import stripe

from ledger_app import api_versions
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")


@pytest.mark.django_db(transaction=True)
def test_the_stripe_client_expands_on_create_retrieve_and_list(stripe_client):
    charge = stripe_client.v1.charges.create(
        params={"amount": 3_000, "currency": "usd", "expand": ["payment_intent"]}
    )
    assert charge.payment_intent.object == "payment_intent"
    assert charge.payment_intent.latest_charge == charge.id

    refund = stripe_client.v1.refunds.create(
        params={"charge": charge.id, "amount": 500, "expand": ["charge"]}
    )
    fetched = stripe_client.v1.refunds.retrieve(
        refund.id, params={"expand": ["charge", "payment_intent"]}
    )
    listed = stripe_client.v1.refunds.list(params={"expand": ["data.charge"]})

    assert (refund.charge.object, refund.charge.id, refund.charge.amount_refunded) == (
        "charge",
        charge.id,
        500,
    )
    assert fetched.charge.id == charge.id and fetched.payment_intent.id == charge.payment_intent.id
    assert [r.charge.id for r in listed.data] == [charge.id]
    plain = stripe_client.v1.refunds.retrieve(refund.id)
    assert plain.charge == charge.id  # unexpanded: the id
    with pytest.raises(stripe.InvalidRequestError) as refused:
        stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 1, "expand": ["balance_transaction"]}
        )
    assert (refused.value.code, refused.value.param) == ("parameter_invalid", "expand")
    assert "cannot be expanded (balance_transaction)" in refused.value.user_message


@pytest.mark.django_db
class TestLists:
    def test_a_page_expands_each_field_in_one_query(self, api, django_assert_max_num_queries):
        for _ in range(5):
            create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))

        with django_assert_max_num_queries(8):  # key check, page, charges, their refunds, intents
            page = api.get(
                "/v1/refunds", {"expand[]": ["data.charge", "data.payment_intent"]}
            ).json()

        assert len(page["data"]) == 5
        for refund in page["data"]:
            assert refund["charge"]["object"] == "charge"
            assert "refunds" not in refund["charge"]  # the current API version's charge
            assert refund["payment_intent"]["latest_charge"] == refund["charge"]["id"]

    def test_data_refunds_shows_a_hundred_refunds_per_charge(self, api):
        charge = ChargeFactory(amount=50_000)
        for _ in range(12):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))

        legacy = {"HTTP_STRIPE_VERSION": api_versions.LEGACY}
        plain = api.get("/v1/charges", **legacy).json()["data"][0]["refunds"]
        expanded = api.get("/v1/charges", {"expand[]": "data.refunds"}).json()["data"][0]
        old = api.get("/v1/refunds", {"expand[]": "data.charge"}, **legacy).json()["data"][0]
        assert old["charge"]["refunds"]["data"][0]["id"] == old["id"]
        one = api.get(f"/v1/charges/{charge.id}", {"expand[]": "refunds"}).json()

        assert (len(plain["data"]), plain["has_more"]) == (10, True)
        assert (len(expanded["refunds"]["data"]), expanded["refunds"]["has_more"]) == (12, False)
        assert len(one["refunds"]["data"]) == 12

    def test_a_charge_without_a_payment_intent_keeps_null(self, api):
        from ledger_app.charges.services import record_charge

        charge = record_charge(amount=1_000, currency="usd", payment_intent="")

        shown = api.get(f"/v1/charges/{charge.id}", {"expand[]": "payment_intent"}).json()

        assert shown["payment_intent"] is None

    @pytest.mark.parametrize(
        ("path", "asked"),
        [
            ("/v1/refunds", "charge"),  # a list expands data.charge, not charge
            ("/v1/charges/{charge}", "data.refunds"),
            ("/v1/charges/{charge}", "charge"),
            ("/v1/refunds/{refund}", "charge.refunds"),  # one level only
            ("/v1/events", "data.object"),
            ("/v1/payment_intents/{intent}", "latest_charge.refunds"),  # one level only
        ],
    )
    def test_anything_else_cannot_be_expanded(self, api, path, asked):
        charge = ChargeFactory()
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
        url = path.format(charge=charge.id, refund=refund.id, intent=charge.payment_intent)

        response = api.get(url, {"expand[]": asked})

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("parameter_invalid", "expand")
        assert f"({asked})" in error["message"]
