"""Issue 43: in demo mode (the simulated provider) Stripe's documented test tokens that
decline do decline, with their codes, through the official client as through Stripe's
test mode; any other source is charged."""

import pytest
import stripe

from ledger_app.models import Charge
from simulated_provider.decline_tokens import DECLINE_CODES, decline_code

pytestmark = pytest.mark.django_db(transaction=True)

# Stripe's documented token, its decline_code and the card error's code.
DOCUMENTED = [
    ("tok_chargeDeclined", "generic_decline", "card_declined"),
    ("tok_chargeDeclinedInsufficientFunds", "insufficient_funds", "card_declined"),
    ("tok_chargeDeclinedLostCard", "lost_card", "card_declined"),
    ("tok_chargeDeclinedStolenCard", "stolen_card", "card_declined"),
    ("tok_chargeDeclinedFraudulent", "fraudulent", "card_declined"),
    ("tok_chargeDeclinedExpiredCard", "expired_card", "expired_card"),
    ("tok_chargeDeclinedIncorrectCvc", "incorrect_cvc", "incorrect_cvc"),
    ("tok_chargeDeclinedProcessingError", "processing_error", "processing_error"),
    ("tok_visa_chargeDeclinedInsufficientFunds", "insufficient_funds", "card_declined"),
]


@pytest.mark.parametrize(("token", "decline", "code"), DOCUMENTED)
def test_a_declining_token_declines_with_its_codes(stripe_client, token, decline, code):
    params = {"amount": 500, "currency": "usd", "source": token}

    with pytest.raises(stripe.CardError) as raised:
        stripe_client.v1.charges.create(params=params)

    error = raised.value
    assert error.error is not None
    assert (error.http_status, error.code, error.error.decline_code) == (402, code, decline)
    charge = Charge.objects.get(pk=error.error.charge)
    assert (charge.status, charge.status_detail, charge.amount_refunded) == ("failed", decline, 0)


@pytest.mark.parametrize("source", ["tok_visa", "tok_mastercard", "tok_chargedeclined", "x"])
def test_other_sources_are_charged(stripe_client, source):
    charge = stripe_client.v1.charges.create(
        params={"amount": 500, "currency": "usd", "source": source}
    )

    assert charge.status == "succeeded" and charge.paid is True


def test_the_table_reads_only_whole_token_names():
    assert {decline_code(f"tok_{name}") for name in DECLINE_CODES} == set(DECLINE_CODES.values())
    for hostile in (None, 5, "chargeDeclined", "tok_", "tok_chargeDeclined ", "tok_visa_"):
        assert decline_code(hostile) is None
