"""The simulated provider's card network gives a refund's ARN some time after the refund
was made (SIMULATED_ARN_DELAY_SECONDS), as real networks do: none in the refund's own
answer, none from a lookup before the delay, then the same 23 digits every time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.models import Charge
from ledger_app.provider.gateways.simulated import SimulatedGateway
from simulated_provider import news
from simulated_provider.card_network import acquirer_reference
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

DELAY = 60


@pytest.fixture(autouse=True)
def _delay(settings):
    settings.SIMULATED_ARN_DELAY_SECONDS = DELAY


def refund(gateway: SimulatedGateway, charge: Charge, key: str = "refund:re_1"):
    return gateway.refund(
        provider_key=key,
        charge_reference=charge.id,
        amount=500,
        currency=charge.currency,
        metadata={"ledger_refund_id": key[7:], "ledger_charge_id": charge.id},
        timeout=2.0,
    )


def look_up(gateway: SimulatedGateway, charge: Charge, key: str = "refund:re_1"):
    return gateway.lookup_refund(
        provider_key=key, charge_reference=charge.id, ledger_refund_id=key[7:]
    )


def made_ago(seconds: float, key: str = "refund:re_1") -> None:
    """Step the clock: the provider made the refund this long ago."""
    ProviderRefund.objects.filter(idempotency_key=key).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


class TestTheDelay:
    def test_the_refunds_own_answer_carries_none(self):
        answer = refund(SimulatedGateway(), ChargeFactory())

        assert answer.verdict == "succeeded" and answer.reference == ""

    def test_a_lookup_before_the_delay_has_none_and_after_it_has_23_digits(self):
        gateway, charge = SimulatedGateway(), ChargeFactory()
        refund(gateway, charge)

        made_ago(DELAY - 5)
        assert look_up(gateway, charge).reference == ""

        made_ago(DELAY + 1)
        reference = look_up(gateway, charge).reference
        assert len(reference) == 23 and reference.isdigit()

    def test_the_arn_is_stable_and_each_refunds_own(self):
        gateway, charge = SimulatedGateway(), ChargeFactory(amount=10_000)
        refund(gateway, charge, "refund:re_1")
        refund(gateway, charge, "refund:re_2")
        made_ago(DELAY + 1, "refund:re_1")
        made_ago(DELAY + 1, "refund:re_2")

        first = look_up(gateway, charge, "refund:re_1").reference
        again = look_up(gateway, charge, "refund:re_1").reference
        other = look_up(gateway, charge, "refund:re_2").reference

        assert first == again != other
        record = ProviderRefund.objects.get(idempotency_key="refund:re_1")
        assert acquirer_reference(record) == first  # derived from the refund, nothing stored

    def test_with_no_delay_the_answer_itself_carries_it(self, settings):
        settings.SIMULATED_ARN_DELAY_SECONDS = 0

        answer = refund(SimulatedGateway(), ChargeFactory())

        assert len(answer.reference) == 23

    def test_a_declined_refund_never_gets_one(self):
        gateway = SimulatedGateway()
        charge = ChargeFactory(metadata={"simulate_refund": "decline"})
        refund(gateway, charge)
        made_ago(DELAY + 1)

        assert look_up(gateway, charge).reference == ""

    def test_a_refund_that_failed_later_has_none_any_more(self):
        gateway = SimulatedGateway()
        charge = ChargeFactory(metadata={"simulate_refund": "succeed_then_fail"})
        refund(gateway, charge)
        made_ago(DELAY + 1)
        news.advance()  # the card was closed: the refund fails

        answer = look_up(gateway, charge)

        assert answer.verdict == "declined" and answer.reference == ""


class TestTheNews:
    def test_its_events_carry_the_reference_as_stripe_shows_it_once_there(self):
        gateway, charge = SimulatedGateway(), ChargeFactory()
        refund(gateway, charge)
        record = ProviderRefund.objects.get()

        before = news.event_about(record, "refund.updated")["data"]["object"]
        made_ago(DELAY + 1)
        record.refresh_from_db()
        after = news.event_about(record, "refund.updated")["data"]["object"]

        assert before["destination_details"]["card"]["reference"] is None
        assert before["destination_details"]["card"]["reference_status"] == "pending"
        assert after["destination_details"] == {
            "type": "card",
            "card": {
                "reference": acquirer_reference(record),
                "reference_status": "available",
                "reference_type": "acquirer_reference_number",
                "type": "refund",
            },
        }
