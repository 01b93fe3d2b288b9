"""A card refund's reference (ARN) from outside: one guard (ledger_app/provider/card_references.py),
and the Stripe adapter reading it from refunds' `destination_details` through it (no
database). Anything that is not a short token of ASCII letters and digits is no
reference: ignored, and the answer is otherwise the same."""

from __future__ import annotations

import pytest
import stripe

from ledger_app.provider.card_references import card_reference, guarded_reference
from ledger_app.provider.gateways.base import ProviderAnswer
from ledger_app.provider.gateways.stripe import StripeGateway, _refund_answer
from tests.gateways.stripe_stub import StripeStub

ARN = "74987654321012345678901"  # 23 digits, as real ARNs are


def card(reference: object) -> dict:
    return {"type": "card", "card": {"reference": reference, "reference_status": "available"}}


HOSTILE_REFERENCES = [
    pytest.param("7" * 65, id="one-too-long"),
    pytest.param("7" * 10_000, id="far-too-long"),
    pytest.param("", id="empty"),
    pytest.param("7498 7654", id="space"),
    pytest.param("74987654\n", id="trailing-newline"),
    pytest.param("7498\x007654", id="nul"),
    pytest.param("7498\t7654", id="tab"),
    pytest.param("\u202e74987654", id="bidi-override"),
    pytest.param("७४९८७६५४", id="devanagari-digits"),
    pytest.param("７４９８", id="fullwidth-digits"),
    pytest.param("74987654é", id="accented"),
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param("<script>", id="markup"),
    pytest.param("7498-7654", id="punctuation"),
    pytest.param(74987654321012345678901, id="int"),
    pytest.param(7.4e22, id="float"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="null"),
    pytest.param(["74987654"], id="list"),
    pytest.param({"$ne": ""}, id="object"),
    pytest.param(b"74987654", id="bytes"),
]


class TestTheGuard:
    @pytest.mark.parametrize("value", [ARN, "A", "7" * 64, "REF0042abc"])
    def test_a_short_token_of_letters_and_digits_is_kept(self, value):
        assert guarded_reference(value) == value
        assert card_reference(card(value)) == value

    @pytest.mark.parametrize("value", HOSTILE_REFERENCES)
    def test_anything_else_is_no_reference(self, value):
        assert guarded_reference(value) == ""
        assert card_reference(card(value)) == ""

    def test_a_string_subclass_is_not_taken_for_a_string(self):
        class Sly(str):
            pass

        assert guarded_reference(Sly(ARN)) == ""

    @pytest.mark.parametrize(
        "details",
        [
            pytest.param(None, id="none"),
            pytest.param("card", id="string"),
            pytest.param(["card"], id="list"),
            pytest.param({"type": "card"}, id="no-card"),
            pytest.param({"type": "card", "card": ARN}, id="card-not-an-object"),
            pytest.param({"type": "card", "card": {}}, id="no-reference"),
            pytest.param({"type": "sepa_debit", "card": {"reference": ARN}}, id="other-type"),
            pytest.param({"type": ["card"], "card": {"reference": ARN}}, id="type-a-list"),
            pytest.param({"card": {"reference": ARN}}, id="no-type"),
        ],
    )
    def test_destination_details_that_are_not_a_cards_carry_none(self, details):
        assert card_reference(details) == ""


def stripe_refund(**fields) -> stripe.StripeObject:
    """A refund as the stripe package hands it over (not a dict: no .get)."""
    body = {"id": "re_1", "object": "refund", "status": "succeeded", **fields}
    return stripe.StripeObject.construct_from(body, "sk_test")


class TestTheStripeAdapter:
    def test_a_succeeded_refund_answers_with_its_reference(self):
        answer = _refund_answer(stripe_refund(destination_details=card(ARN)))

        assert answer == ProviderAnswer("succeeded", "re_1", reference=ARN)

    @pytest.mark.parametrize("value", HOSTILE_REFERENCES)
    def test_a_hostile_reference_is_dropped_and_the_answer_stands(self, value):
        answer = _refund_answer(stripe_refund(destination_details=card(value)))

        assert answer == ProviderAnswer("succeeded", "re_1")

    @pytest.mark.parametrize("details", [None, "card", 7, ["card"], {"type": "card"}])
    def test_destination_details_of_any_shape_answer_without_one(self, details):
        answer = _refund_answer(stripe_refund(destination_details=details))

        assert answer == ProviderAnswer("succeeded", "re_1")

    def test_a_declined_refund_carries_none(self):
        refund = stripe_refund(
            status="failed", failure_reason="lost_or_stolen_card", destination_details=card(ARN)
        )

        assert _refund_answer(refund) == ProviderAnswer("declined", "re_1", "lost_or_stolen_card")


@pytest.fixture
def stub():
    with StripeStub() as running:
        yield running


def refund_once(gateway: StripeGateway, charge_id: str) -> ProviderAnswer:
    return gateway.refund(
        provider_key="rk_1",
        charge_reference=charge_id,
        amount=300,
        currency="usd",
        metadata={"ledger_refund_id": "rf_1", "ledger_charge_id": "lc_1"},
        timeout=2.0,
    )


def look_up(gateway: StripeGateway, charge_id: str) -> ProviderAnswer | None:
    return gateway.lookup_refund(
        provider_key="rk_1", charge_reference=charge_id, ledger_refund_id="rf_1"
    )


class TestOverTheWire:
    def test_the_answer_has_none_until_stripe_has_it_then_a_lookup_has_it(self, stub):
        gateway = StripeGateway(api_key="sk_test_stub", api_base=stub.url)
        charge_id = stub.add_charge(amount=1000, ledger_charge_id="lc_1")
        stub.destination_details = {"type": "card", "card": {"reference_status": "pending"}}

        sent = refund_once(gateway, charge_id)
        assert sent == ProviderAnswer("succeeded", sent.provider_id)

        stub.refunds[sent.provider_id]["destination_details"] = card(ARN)  # the network gave it
        assert look_up(gateway, charge_id) == ProviderAnswer(
            "succeeded", sent.provider_id, reference=ARN
        )

    def test_a_refund_answered_with_its_reference_carries_it(self, stub):
        gateway = StripeGateway(api_key="sk_test_stub", api_base=stub.url)
        charge_id = stub.add_charge(amount=1000, ledger_charge_id="lc_1")
        stub.destination_details = card(ARN)

        assert refund_once(gateway, charge_id).reference == ARN

    @pytest.mark.parametrize(
        "details",
        [card("7" * 65), card("12\n34"), card(12345), card({"a": 1}), "card", [card(ARN)]],
    )
    def test_a_hostile_reference_in_a_lookup_is_ignored(self, stub, details):
        gateway = StripeGateway(api_key="sk_test_stub", api_base=stub.url)
        charge_id = stub.add_charge(amount=1000, ledger_charge_id="lc_1")
        sent = refund_once(gateway, charge_id)

        stub.refunds[sent.provider_id]["destination_details"] = details

        assert look_up(gateway, charge_id) == ProviderAnswer("succeeded", sent.provider_id)
