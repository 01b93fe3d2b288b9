"""POST /v1/charges: what the request names reaches the provider and the key's
fingerprint."""

import pytest

from ledger_app.models import Charge

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def test_a_charge_source_reaches_the_provider_and_the_fingerprint(api):
    first = api.post(
        "/v1/charges",
        "amount=500&currency=usd&source=tok_mastercard",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="ck",
    )
    other_card = api.post(
        "/v1/charges",
        "amount=500&currency=usd&source=tok_visa",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="ck",
    )

    assert first.status_code == 200
    assert Charge.objects.get().metadata["source"] == "tok_mastercard"
    assert other_card.status_code == 400
    assert other_card.json()["error"]["type"] == "idempotency_error"
