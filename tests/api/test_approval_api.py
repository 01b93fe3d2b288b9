"""Refund limits of API keys through /v1/refunds: over the key's limit the refund is shown
as Stripe shows money reserved and not final, `pending`, with our own `ledger_status`
awaiting_approval, and it reaches the provider only once a person approves it."""

import pytest

from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.approvals.services import approve_refund, reject_refund
from ledger_app.models import ApiKey, Refund, RefundLimit
from simulated_provider.models import ProviderRequest
from tests.factories import LEADS_MIGRATION, ChargeFactory, migration_group
from tests.services.people import staff

FORM = "application/x-www-form-urlencoded"

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")


def key_row(secret: str) -> ApiKey:
    return ApiKey.objects.get(prefix=secret[:PREFIX_LENGTH])


def post_refund(api, charge, amount, **headers):
    return api.post(
        "/v1/refunds", f"charge={charge.id}&amount={amount}", content_type=FORM, **headers
    )


@pytest.fixture
def limited_key(db, api_key):
    """The client's read-write key may refund 10.00 at a time, 15.00 a day, unapproved."""
    return RefundLimit.objects.create(
        api_key=key_row(api_key), currency="usd", per_refund=1_000, per_day=1_500
    )


@pytest.fixture
def lead(django_user_model):
    return staff(django_user_model, "api-lead", migration_group(LEADS_MIGRATION))


@pytest.mark.django_db
class TestApiKeyLimits:
    def test_over_the_keys_limit_is_200_pending_awaiting_approval_and_not_sent(
        self, api, limited_key
    ):
        charge = ChargeFactory(amount=5_000)

        response = post_refund(api, charge, 1_001)

        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["status"], body["ledger_status"]) == ("pending", "awaiting_approval")
        stored = Refund.objects.get(pk=body["id"])
        assert stored.status == Refund.Status.AWAITING_APPROVAL
        assert stored.actor == f"api_key:{limited_key.api_key.prefix}"
        assert ProviderRequest.objects.count() == 0
        fetched = api.get(f"/v1/refunds/{body['id']}").json()
        assert (fetched["status"], fetched["ledger_status"]) == ("pending", "awaiting_approval")
        assert api.get(f"/v1/charges/{charge.id}").json()["amount_refunded"] == 1_001

    def test_exactly_the_keys_limit_goes_through(self, api, limited_key):
        charge = ChargeFactory(amount=5_000)

        body = post_refund(api, charge, 1_000).json()

        assert (body["status"], body["ledger_status"]) == ("succeeded", "succeeded")

    def test_the_keys_daily_limit_counts_its_earlier_refunds(self, api, limited_key):
        charge = ChargeFactory(amount=5_000)

        first = post_refund(api, charge, 1_000).json()
        second = post_refund(api, charge, 501).json()

        assert first["status"] == "succeeded"
        assert (second["status"], second["ledger_status"]) == ("pending", "awaiting_approval")

    def test_another_keys_limit_does_not_apply(self, client, limited_key):
        _, other = create_api_key(name="other client")
        charge = ChargeFactory(amount=5_000)

        response = post_refund(client, charge, 4_000, HTTP_AUTHORIZATION=f"Bearer {other}")

        assert response.json()["status"] == "succeeded"

    def test_a_replay_says_replayed_and_shows_it_still_waiting(self, api, limited_key):
        charge = ChargeFactory(amount=5_000)
        key = {"HTTP_IDEMPOTENCY_KEY": "order-9-refund"}
        first = post_refund(api, charge, 2_000, **key)

        again = post_refund(api, charge, 2_000, **key)

        assert again.status_code == 200
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json()["id"] == first.json()["id"]
        assert again.json()["ledger_status"] == "awaiting_approval"
        assert Refund.objects.count() == 1

    def test_once_approved_it_shows_what_the_provider_said(self, api, limited_key, lead):
        charge = ChargeFactory(amount=5_000)
        refund_id = post_refund(api, charge, 2_000).json()["id"]

        approve_refund(refund_id=refund_id, approver=lead)

        fetched = api.get(f"/v1/refunds/{refund_id}").json()
        assert (fetched["status"], fetched["ledger_status"]) == ("succeeded", "succeeded")
        assert ProviderRequest.objects.filter(operation="refund").count() == 1

    def test_once_rejected_it_is_canceled_and_the_charge_released(self, api, limited_key, lead):
        charge = ChargeFactory(amount=5_000)
        refund_id = post_refund(api, charge, 2_000).json()["id"]

        reject_refund(refund_id=refund_id, approver=lead, note="not this order")

        fetched = api.get(f"/v1/refunds/{refund_id}").json()
        assert (fetched["status"], fetched["ledger_status"]) == ("canceled", "canceled")
        assert api.get(f"/v1/charges/{charge.id}").json()["amount_refunded"] == 0
        assert ProviderRequest.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_stripe_client_sees_pending_awaiting_approval_then_succeeded(
    stripe_client, limited_key, lead
):
    charge = ChargeFactory(amount=5_000)

    refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 2_000})
    approve_refund(refund_id=refund.id, approver=lead)
    fetched = stripe_client.v1.refunds.retrieve(refund.id)

    assert (refund.status, refund.ledger_status) == ("pending", "awaiting_approval")
    assert (fetched.status, fetched.ledger_status) == ("succeeded", "succeeded")
    assert ProviderRequest.objects.filter(operation="refund").count() == 1
