"""An Idempotency-Key is its API key's own, as Stripe scopes keys to an account (issue
44, finding 10): another client sending the same key makes its own refund, and can
neither replay nor block the first client's."""

import pytest

from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.models import IdempotencyRecord, Refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
FORM = "application/x-www-form-urlencoded"


def refund(client, secret: str, body: str, key: str):
    return client.post(
        "/v1/refunds",
        body,
        content_type=FORM,
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_IDEMPOTENCY_KEY=key,
    )


@pytest.mark.django_db
class TestIdempotencyKeysOfTwoClients:
    def test_two_api_keys_with_one_idempotency_key_make_two_refunds(self, client):
        charge = ChargeFactory(amount=5_000)
        mine, theirs = create_api_key(name="mine")[1], create_api_key(name="theirs")[1]

        first = refund(client, mine, f"charge={charge.id}&amount=700", "order-1")
        second = refund(client, theirs, f"charge={charge.id}&amount=700", "order-1")

        assert first.status_code == second.status_code == 200, second.content
        assert first.json()["id"] != second.json()["id"]
        assert "Idempotent-Replayed" not in second
        assert Refund.objects.count() == 2
        assert set(IdempotencyRecord.objects.values_list("owner", flat=True)) == {
            f"api_key:{mine[:PREFIX_LENGTH]}",
            f"api_key:{theirs[:PREFIX_LENGTH]}",
        }

    def test_another_client_cannot_block_a_key_with_another_request(self, client):
        charge = ChargeFactory(amount=5_000)
        mine, theirs = create_api_key(name="mine")[1], create_api_key(name="theirs")[1]
        squatted = refund(client, theirs, f"charge={charge.id}&amount=1", "order-2")

        mine_first = refund(client, mine, f"charge={charge.id}&amount=700", "order-2")

        assert squatted.status_code == 200
        assert mine_first.status_code == 200, mine_first.content
        assert mine_first.json()["amount"] == 700

    def test_the_same_key_of_the_same_client_replays(self, client):
        charge = ChargeFactory(amount=5_000)
        mine = create_api_key(name="mine")[1]

        first = refund(client, mine, f"charge={charge.id}&amount=700", "order-3")
        again = refund(client, mine, f"charge={charge.id}&amount=700", "order-3")
        changed = refund(client, mine, f"charge={charge.id}&amount=800", "order-3")

        assert again.json()["id"] == first.json()["id"]
        assert again["Idempotent-Replayed"] == "true"
        assert changed.status_code == 400
        assert changed.json()["error"]["type"] == "idempotency_error"
        assert Refund.objects.count() == 1


@pytest.mark.django_db
class TestChargeKeysOfTwoClients:
    def charge(self, client, secret: str, amount: int, key: str):
        return client.post(
            "/v1/charges",
            f"amount={amount}&currency=usd",
            content_type=FORM,
            HTTP_AUTHORIZATION=f"Bearer {secret}",
            HTTP_IDEMPOTENCY_KEY=key,
        )

    def test_two_api_keys_with_one_key_make_two_charges_and_each_replays_its_own(self, client):
        mine, theirs = create_api_key(name="mine")[1], create_api_key(name="theirs")[1]

        first = self.charge(client, mine, 1_000, "cart-1")
        second = self.charge(client, theirs, 2_000, "cart-1")
        again = self.charge(client, mine, 1_000, "cart-1")

        assert first.status_code == second.status_code == 200, second.content
        assert second.json()["amount"] == 2_000
        assert first.json()["id"] != second.json()["id"]
        assert again.json()["id"] == first.json()["id"]
        assert again["Idempotent-Replayed"] == "true"
        assert IdempotencyRecord.objects.filter(key="cart-1").count() == 2
