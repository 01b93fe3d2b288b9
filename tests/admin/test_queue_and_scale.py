"""The needs-attention queue, finding charges, and pages that cost the same at any size."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

ATTENTION = "admin:ledger_app_refundattention_changelist"


def charge_that(behaviour, amount=5_000):
    return ChargeFactory(amount=amount, metadata={"simulate_refund": behaviour})


class TestNeedsAttention:
    def test_lists_unknown_failed_and_stale_pending_refunds_only(self, agent_client, settings):
        unknown = create_refund(RefundRequest(charge_id=charge_that("timeout").pk, amount=100)).item
        failed = create_refund(RefundRequest(charge_id=charge_that("decline").pk, amount=100)).item
        fine = create_refund(RefundRequest(charge_id=charge_that("succeed").pk, amount=100)).item
        settings.REFUND_DISPATCH = "worker"
        waiting = create_refund(RefundRequest(charge_id=charge_that("succeed").pk, amount=100)).item
        stale = create_refund(RefundRequest(charge_id=charge_that("succeed").pk, amount=100)).item
        Refund.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(hours=1))

        page = agent_client.get(reverse(ATTENTION)).content.decode()

        assert unknown.pk in page and failed.pk in page and stale.pk in page
        assert fine.pk not in page and waiting.pk not in page

    def test_reconcile_now_settles_a_lost_answer(self, agent_client):
        refund = create_refund(
            RefundRequest(charge_id=charge_that("apply_then_timeout").pk, amount=100)
        ).item
        assert refund.status == "unknown"

        response = agent_client.post(
            reverse(ATTENTION), {"action": "reconcile_now", "_selected_action": [refund.pk]}
        )

        refund.refresh_from_db()
        assert response.status_code == 302
        assert refund.status == "succeeded"
        assert ProviderRefund.objects.count() == 1

    def test_retry_dispatch_sends_with_the_same_key(self, agent_client):
        charge = charge_that("timeout")
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=100)).item
        charge.metadata = {"simulate_refund": "succeed"}
        charge.save(update_fields=["metadata"])

        agent_client.post(
            reverse(ATTENTION), {"action": "retry_dispatch", "_selected_action": [refund.pk]}
        )

        refund.refresh_from_db()
        assert refund.status == "succeeded"
        assert ProviderRefund.objects.get().idempotency_key == f"refund:{refund.pk}"

    def test_viewers_cannot_run_the_queue_actions(self, viewer_client):
        refund = create_refund(
            RefundRequest(charge_id=charge_that("apply_then_timeout").pk, amount=100)
        ).item

        page = viewer_client.get(reverse(ATTENTION))
        viewer_client.post(
            reverse(ATTENTION), {"action": "reconcile_now", "_selected_action": [refund.pk]}
        )

        assert b"reconcile_now" not in page.content
        refund.refresh_from_db()
        assert refund.status == "unknown"


class TestFindingCharges:
    def test_search_by_id_customer_amount_and_description(self, admin_client):
        coffee = ChargeFactory(amount=1_234, description="Coffee beans", customer="cus_42")
        yen = ChargeFactory(amount=1_234, currency="jpy", description="Bento")
        other = ChargeFactory(amount=999, description="Tea")
        url = reverse("admin:ledger_app_charge_changelist")

        def found(term):
            page = admin_client.get(url, {"q": term}).content.decode()
            return {c.pk for c in (coffee, yen, other) if c.pk in page}

        assert found(coffee.pk) == {coffee.pk}
        assert found("cus_42") == {coffee.pk}
        assert found("12.34") == {coffee.pk}  # $12.34; ¥1,234 is 1234 yen, not 12.34
        assert found("1234") == {yen.pk}
        assert found("bento") == {yen.pk}
        assert found(yen.payment_intent) == {yen.pk}  # a whole PaymentIntent id
        assert found(yen.payment_intent[:-1]) == set()  # exactly, not partly
        assert admin_client.get(url, {"q": "ch_\x00"}).status_code < 500

    def test_refund_state_filter(self, admin_client, fully_refunded_charge):
        partial = ChargeFactory(amount=1_000)
        create_refund(RefundRequest(charge_id=partial.pk, amount=100))
        untouched = ChargeFactory(amount=1_000)
        url = reverse("admin:ledger_app_charge_changelist")

        def listed(state):
            page = admin_client.get(url, {"refunded": state}).content.decode()
            return {c.pk for c in (fully_refunded_charge, partial, untouched) if c.pk in page}

        assert listed("none") == {untouched.pk}
        assert listed("partial") == {partial.pk}
        assert listed("full") == {fully_refunded_charge.pk}


@pytest.mark.parametrize(
    ("url_name", "params"),
    [
        ("admin:ledger_app_charge_changelist", {}),
        (
            "admin:ledger_app_charge_changelist",
            {"status__exact": "succeeded", "refunded": "partial"},
        ),
        ("admin:ledger_app_charge_changelist", {"q": "12.34"}),
        ("admin:ledger_app_refund_changelist", {}),
        ("admin:ledger_app_refund_changelist", {"status__exact": "succeeded"}),
        ("admin:ledger_app_refundattention_changelist", {}),
        ("admin:ledger_app_ledgerentry_changelist", {}),
    ],
)
def test_changelist_query_count_does_not_grow_with_rows(admin_client, url_name, params):
    def queries_for_page() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(reverse(url_name), params)
        assert response.status_code == 200
        return len(queries)

    for _ in range(3):
        create_refund(RefundRequest(charge_id=ChargeFactory(amount=1_234).pk, amount=100))
    few = queries_for_page()
    for _ in range(30):
        create_refund(RefundRequest(charge_id=ChargeFactory(amount=1_234).pk, amount=100))
    many = queries_for_page()

    assert many == few
