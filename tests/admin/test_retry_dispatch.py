"""The needs-attention queue's retry_dispatch action asks the provider before it resends."""

import pytest
from django.urls import reverse

from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import ChargeFactory
from tests.second_factor import verified

pytestmark = pytest.mark.django_db


def test_admin_retry_dispatch_asks_first(client, admin_user):
    admin_client = verified(client, admin_user)  # superusers too enter a code to move money
    charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "apply_then_timeout"})
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=300)).item

    admin_client.post(
        reverse("admin:ledger_app_refundattention_changelist"),
        {"action": "retry_dispatch", "_selected_action": [refund.pk]},
    )

    refund.refresh_from_db()
    assert refund.status == "succeeded"
    assert ProviderRequest.objects.filter(operation="refund").count() == 1
