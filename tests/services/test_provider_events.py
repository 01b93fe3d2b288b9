"""The provider's later word: POST /webhooks/stripe, the reconciler's re-check, and the
simulated provider's news all settle through the one settle function."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import time

import pytest
from django.core.management import call_command

from ledger_app.ledger.drift import find_ledger_drift
from ledger_app.models import Event, LedgerEntry, ProviderEvent, Refund
from ledger_app.provider.dispatch import reconcile_refunds
from ledger_app.refunds.selectors import needing_attention
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.sqlite_pass

SECRET = "whsec_test_provider_secret"
URL = "/webhooks/stripe"


@pytest.fixture(autouse=True)
def _webhook_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET


def signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> str:
    """Stripe's Stripe-Signature header for this body."""
    at = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def refund_event(refund: Refund, status: str, *, event_id: str, failure: str = "") -> dict:
    return {
        "id": event_id,
        "object": "event",
        "type": "refund.failed" if status == "failed" else "refund.updated",
        "created": int(time.time()),
        "data": {
            "object": {
                "id": refund.provider_refund_id or "re_provider_unseen",
                "object": "refund",
                "charge": refund.charge.provider_reference,
                "amount": refund.amount,
                "currency": refund.currency,
                "status": status,
                "failure_reason": failure or None,
                "metadata": {"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
            }
        },
    }


def post(client, event: dict, **sign):
    body = json.dumps(event).encode()
    return client.post(
        URL, body, content_type="application/json", HTTP_STRIPE_SIGNATURE=signed(body, **sign)
    )


def as_booked(refund: Refund) -> tuple[str, int, list[str]]:
    """What the ledger holds of a refund: its status, its charge's amount_refunded and the
    kinds of its ledger entries."""
    refund.refresh_from_db()
    refund.charge.refresh_from_db()
    kinds = list(LedgerEntry.objects.filter(refund=refund).values_list("kind", flat=True))
    return refund.status, refund.charge.amount_refunded, kinds


@pytest.fixture
def unknown_refund(db):
    """A refund the provider accepted as pending: unknown to the ledger."""
    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "pending_then_succeed"})
    return create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item


@pytest.fixture
def succeeded_refund(db):
    charge = ChargeFactory(amount=5_000)
    return create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item


class TestInboundWebhook:
    def test_pending_then_succeeded_settles_the_refund(self, client, unknown_refund):
        assert unknown_refund.status == "unknown"

        answer = post(client, refund_event(unknown_refund, "succeeded", event_id="evt_1"))

        assert answer.status_code == 200
        assert as_booked(unknown_refund) == (
            "succeeded",
            1_200,
            ["refund_reserved", "refund_succeeded"],
        )
        assert answer.json()["outcome"] == f"refund {unknown_refund.id}: unknown -> succeeded"

    def test_succeeded_then_failed_releases_the_amount(self, client, succeeded_refund):
        event = refund_event(
            succeeded_refund, "failed", event_id="evt_2", failure="expired_or_canceled_card"
        )

        answer = post(client, event)

        assert answer.status_code == 200
        assert as_booked(succeeded_refund) == (
            "failed",
            0,
            ["refund_reserved", "refund_succeeded", "refund_released"],
        )
        assert succeeded_refund.status_detail == "expired_or_canceled_card"
        assert succeeded_refund.charge.amount_refundable == 5_000
        assert list(find_ledger_drift()) == []
        assert Refund.objects.filter(needing_attention(), pk=succeeded_refund.pk).exists()
        failed = Event.objects.get(refund=succeeded_refund, type="refund.failed")
        assert failed.previous_attributes == {
            "status": "succeeded",
            "ledger_status": "succeeded",
            "failure_reason": None,  # left out while it had not failed
            "destination_details": {  # its card's reference, to come
                "card": {
                    "reference_status": "pending",
                    "reference_type": "acquirer_reference_number",
                    "type": "refund",
                },
                "type": "card",
            },
        }
        assert failed.data_object["status"] == "failed"

    def test_a_repeated_event_changes_nothing(self, client, succeeded_refund):
        event = refund_event(succeeded_refund, "failed", event_id="evt_3")
        assert post(client, event).status_code == 200
        before = (as_booked(succeeded_refund), Event.objects.count())

        again = post(client, event)

        assert again.status_code == 200
        assert again.json()["outcome"] == "duplicate: already applied"
        assert (as_booked(succeeded_refund), Event.objects.count()) == before
        assert ProviderEvent.objects.filter(pk="evt_3").count() == 1

    @pytest.mark.parametrize(
        "sign",
        [
            {"secret": "whsec_someone_else"},
            {"at": int(time.time()) - 3_600},  # stale: older than the 5-minute tolerance
        ],
        ids=["wrong_secret", "stale"],
    )
    def test_a_bad_or_stale_signature_is_400_and_writes_nothing(self, client, unknown_refund, sign):
        before = as_booked(unknown_refund)

        answer = post(client, refund_event(unknown_refund, "succeeded", event_id="evt_4"), **sign)

        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "signature_invalid"
        assert as_booked(unknown_refund) == before
        assert not ProviderEvent.objects.exists()

    def test_no_signature_or_a_tampered_body_is_400(self, client, unknown_refund):
        body = json.dumps(refund_event(unknown_refund, "succeeded", event_id="evt_5")).encode()
        header = signed(body)

        unsigned = client.post(URL, body, content_type="application/json")
        tampered = client.post(
            URL,
            body.replace(b'"succeeded"', b'"failed"'),
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=header,
        )

        assert (unsigned.status_code, tampered.status_code) == (400, 400)
        assert unknown_refund.status == as_booked(unknown_refund)[0] == "unknown"
        assert not ProviderEvent.objects.exists()

    def test_an_event_about_a_refund_of_an_unknown_charge_is_stored_and_acknowledged(
        self, client, db
    ):
        refund: dict[str, object] = {"id": "re_elsewhere", "object": "refund"}
        refund |= {"charge": "ch_elsewhere", "amount": 500, "currency": "usd"}
        refund |= {"status": "succeeded"}
        event = {"id": "evt_6", "type": "refund.updated", "data": {"object": refund}}

        answer = post(client, event)

        assert answer.status_code == 200
        assert (
            ProviderEvent.objects.get(pk="evt_6").outcome
            == "unknown charge ch_elsewhere of refund re_elsewhere"
        )
        assert not Event.objects.exists() and not Refund.objects.exists()

    def test_an_older_pending_after_succeeded_changes_nothing(self, client, unknown_refund):
        post(client, refund_event(unknown_refund, "succeeded", event_id="evt_new"))
        before = as_booked(unknown_refund)

        answer = post(client, refund_event(unknown_refund, "pending", event_id="evt_old"))

        assert answer.status_code == 200
        assert as_booked(unknown_refund) == before == ("succeeded", 1_200, before[2])

    def test_an_older_succeeded_after_failed_changes_nothing(self, client, succeeded_refund):
        post(client, refund_event(succeeded_refund, "failed", event_id="evt_fail"))

        post(client, refund_event(succeeded_refund, "succeeded", event_id="evt_late_success"))

        assert as_booked(succeeded_refund)[:2] == ("failed", 0)

    def test_get_is_not_allowed(self, client, db):
        assert client.get(URL).status_code == 405


class TestReconcilerRecheck:
    def test_a_missed_failure_webhook_is_caught_by_reconcile(self, db):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "succeed_then_fail"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item
        assert refund.status == "succeeded"
        news.advance()  # the provider fails it; its webhook never arrives

        out = io.StringIO()
        call_command("reconcile", stdout=out)

        assert as_booked(refund) == (
            "failed",
            0,
            ["refund_reserved", "refund_succeeded", "refund_released"],
        )
        assert "succeeded refunds now failed: 1" in out.getvalue()

    def test_recheck_leaves_refunds_outside_the_window_and_still_succeeded_ones(self, db, settings):
        fine = create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100)).item
        charge = ChargeFactory(metadata={"simulate_refund": "succeed_then_fail"})
        failing = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
        news.advance()
        settings.RECONCILE_RECHECK_HOURS = 0

        call_command("reconcile", stdout=io.StringIO())

        assert as_booked(fine)[0] == as_booked(failing)[0] == "succeeded"


@pytest.fixture
def webhook_door(live_server, settings):
    """The simulated provider's news go over HTTP to this test's server, signed."""
    settings.STRIPE_WEBHOOK_SECRET = "whsec_simulated_news"
    settings.SIMULATED_PROVIDER_WEBHOOK_URL = f"{live_server.url}/webhooks/stripe"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_door")
class TestSimulatedProviderNews:
    def test_pending_then_succeed_settles_when_the_provider_sends_its_news(self, unknown_refund):
        reconcile_refunds()  # the provider still says pending: nothing changes
        assert as_booked(unknown_refund)[0] == "unknown"

        out = io.StringIO()
        call_command("advance_simulated_provider", stdout=out)

        assert as_booked(unknown_refund) == (
            "succeeded",
            1_200,
            ["refund_reserved", "refund_succeeded"],
        )
        assert ProviderRefund.objects.get().status == "succeeded"
        assert "advance_simulated_provider: 1 events sent" in out.getvalue()

    def test_succeed_then_fail_releases_the_amount_when_the_news_arrives(self):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "succeed_then_fail"})
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item

        call_command("advance_simulated_provider", stdout=io.StringIO())
        call_command("advance_simulated_provider", stdout=io.StringIO())  # nothing more

        assert as_booked(refund)[:2] == ("failed", 0)
        assert Event.objects.filter(refund=refund, type="refund.failed").count() == 1
