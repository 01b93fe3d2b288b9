"""A refund sent again after an attempt that may have reached the provider is looked up
there first, never resent blindly."""

import pytest

from ledger_app.models import Refund
from ledger_app.provider.dispatch import process_pending_refunds, send_refund
from ledger_app.provider.gateways.simulated import SimulatedGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


class ForgetfulProvider(SimulatedGateway):
    """Like a provider that has dropped its idempotency keys: a resend would be a new
    refund. Counts what it is asked."""

    def __init__(self):
        self.sent = 0

    def refund(self, **kwargs):
        self.sent += 1
        return super().refund(**kwargs)


class TestNoResendWithoutAsking:
    def test_an_unknown_refund_is_looked_up_before_it_is_sent_again(self):
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "apply_then_timeout"})
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=300)).item
        assert refund.status == "unknown"
        provider = ForgetfulProvider()

        settled = send_refund(refund.pk, gateway=provider).item

        assert settled.status == "succeeded"
        assert provider.sent == 0
        assert ProviderRefund.objects.count() == 1

    def test_a_second_worker_attempt_asks_first(self, settings):
        settings.REFUND_DISPATCH = "worker"
        charge = ChargeFactory(amount=1_000)
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=300)).item
        SimulatedGateway().refund(  # the first attempt reached the provider, then died
            provider_key=refund.provider_idempotency_key,
            charge_reference=charge.pk,
            amount=300,
            currency="usd",
            metadata={"ledger_refund_id": refund.pk},
            timeout=5,
        )
        Refund.objects.filter(pk=refund.pk).update(dispatch_attempts=1)
        provider = ForgetfulProvider()

        process_pending_refunds(gateway=provider, lease_seconds=0)

        refund.refresh_from_db()
        assert refund.status == "succeeded" and provider.sent == 0
        assert list(
            ProviderRequest.objects.filter(operation="refund").values_list("outcome", flat=True)
        ) == ["succeeded"]
