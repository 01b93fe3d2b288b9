"""POST /v1/refunds/{id}/cancel takes back a refund awaiting approval (its amount
released, as a rejection does, with refund.updated), and POST /v1/charges/{id}/refunds
creates a refund as Stripe's older endpoint does."""

import pytest
import stripe

from ledger_app.models import ApiKey, Event, LedgerEntry, Refund, RefundLimit
from ledger_app.services.api_keys import PREFIX_LENGTH, create_api_key
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
FORM = "application/x-www-form-urlencoded"


def cancel(client, refund_id: str, **headers):
    return client.post(f"/v1/refunds/{refund_id}/cancel", "", content_type=FORM, **headers)


@pytest.fixture
def waiting(api, api_key):
    """A refund of 20.00 over the key's 10.00 limit: awaiting approval."""
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=1_000, per_day=5_000)
    charge = ChargeFactory(amount=5_000)
    body = api.post("/v1/refunds", f"charge={charge.id}&amount=2000", content_type=FORM).json()
    assert body["ledger_status"] == "awaiting_approval"
    return Refund.objects.get(pk=body["id"])


@pytest.mark.django_db(transaction=True)
def test_the_stripe_client_cancels_a_waiting_refund(stripe_client, api_key):
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=100, per_day=100)
    charge = ChargeFactory(amount=5_000)
    refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 2_000})

    canceled = stripe_client.v1.refunds.cancel(refund.id)

    assert (canceled.status, canceled.ledger_status, canceled.failure_reason) == (
        "canceled",
        "canceled",
        "merchant_request",
    )
    assert stripe_client.v1.charges.retrieve(charge.id).amount_refunded == 0
    with pytest.raises(stripe.InvalidRequestError) as again:
        stripe_client.v1.refunds.cancel(refund.id)
    assert (again.value.http_status, again.value.code) == (400, "refund_not_cancelable")


@pytest.mark.django_db
class TestCancel:
    def test_it_releases_the_amount_and_tells_refund_updated(self, api, waiting):
        response = cancel(api, waiting.id)

        assert response.status_code == 200, response.content
        assert response.json()["status"] == "canceled"
        waiting.refresh_from_db()
        assert waiting.status == "canceled" and waiting.charge.amount_refunded == 0
        released = LedgerEntry.objects.get(refund=waiting, kind="refund_released")
        assert released.amount == 2_000 and released.memo.startswith("canceled:")
        assert waiting.decided_by == waiting.actor  # the requester took it back
        update = Event.objects.get(refund=waiting, type="refund.updated")
        assert update.previous_attributes == {
            "destination_details": {
                "card": {"reference_status": "pending", "type": "pending"},
                "type": "card",
            },
            "failure_reason": None,
            "ledger_status": "awaiting_approval",
            "status": "pending",
        }
        assert ProviderRequest.objects.count() == 0  # never sent

    def test_another_write_key_may_cancel_it_a_read_only_key_may_not(self, client, waiting):
        other = create_api_key(name="ops")[1]
        reader = create_api_key(name="reports", read_only=True)[1]

        refused = cancel(client, waiting.id, HTTP_AUTHORIZATION=f"Bearer {reader}")
        done = cancel(client, waiting.id, HTTP_AUTHORIZATION=f"Bearer {other}")

        assert refused.status_code == 403
        assert done.status_code == 200 and done.json()["status"] == "canceled"

    @pytest.mark.parametrize("behaviour", ["succeed", "decline", "timeout"])
    def test_any_other_status_is_400_and_changes_nothing(self, api, behaviour):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": behaviour})
        refund = api.post("/v1/refunds", f"charge={charge.id}&amount=100", content_type=FORM).json()
        before = (Refund.objects.get(pk=refund["id"]).status, LedgerEntry.objects.count())

        response = cancel(api, refund["id"])

        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "refund_not_cancelable" and refund["id"] in error["message"]
        assert (Refund.objects.get(pk=refund["id"]).status, LedgerEntry.objects.count()) == before

    def test_an_unknown_refund_is_404_and_a_parameter_is_refused(self, api, waiting):
        assert cancel(api, "re_nothing").status_code == 404
        bad = api.post(f"/v1/refunds/{waiting.id}/cancel", "amount=1", content_type=FORM)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "parameter_unknown"
        waiting.refresh_from_db()
        assert waiting.status == "awaiting_approval"


@pytest.mark.django_db
class TestTheChargesRefundsEndpoint:
    def test_it_creates_a_refund_of_the_charge_in_the_path(self, api):
        charge = ChargeFactory(amount=5_000)

        made = api.post(
            f"/v1/charges/{charge.id}/refunds",
            "amount=700&reason=duplicate",
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="legacy-1",
        )
        again = api.post(
            f"/v1/charges/{charge.id}/refunds",
            "amount=700&reason=duplicate",
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="legacy-1",
        )

        assert made.status_code == 200, made.content
        body = made.json()
        assert (body["charge"], body["amount"], body["status"]) == (charge.id, 700, "succeeded")
        assert again.json()["id"] == body["id"] and again["Idempotent-Replayed"] == "true"
        listed = api.get(f"/v1/charges/{charge.id}/refunds").json()["data"]
        assert [r["id"] for r in listed] == [body["id"]]

    def test_the_same_money_rules_and_a_404_for_an_unknown_charge(self, api):
        charge = ChargeFactory(amount=500)

        too_much = api.post(f"/v1/charges/{charge.id}/refunds", "amount=501", content_type=FORM)
        named = api.post(
            f"/v1/charges/{charge.id}/refunds", f"charge={charge.id}", content_type=FORM
        )
        missing = api.post("/v1/charges/ch_nothing/refunds", "amount=1", content_type=FORM)

        assert too_much.status_code == 400
        assert too_much.json()["error"]["code"] == "amount_too_large"
        assert named.json()["error"]["code"] == "parameter_unknown"
        assert missing.status_code == 404
        assert not Refund.objects.exists()
