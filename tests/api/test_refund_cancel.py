"""POST /v1/refunds/{id}/cancel takes back a refund awaiting approval (its amount
released, as a rejection does, with refund.updated) at its requester's word only (the key
that asked, the person who asked, or a support lead: issue 44, finding 1), and
POST /v1/charges/{id}/refunds creates a refund as Stripe's older endpoint does."""

import pytest
import stripe

from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.approvals.services import cancel_refund
from ledger_app.errors import RefundNotCancelable
from ledger_app.models import ApiKey, Event, LedgerEntry, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, ChargeFactory, migration_group
from tests.services.people import staff

pytestmark = pytest.mark.usefixtures("inline_dispatch", "ledger_invariants")
FORM = "application/x-www-form-urlencoded"


def cancel(client, refund_id: str, **headers):
    return client.post(f"/v1/refunds/{refund_id}/cancel", "", content_type=FORM, **headers)


@pytest.fixture
def waiting(api, api_key):
    """A refund of 20.00 over the key's 10.00 limit: awaiting approval."""
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=1_000, per_day=5_000)
    charge = ChargeFactory(amount=5_000)
    body = api.post("/v1/refunds", f"charge={charge.id}&amount=2000", content_type=FORM).json()
    assert body["ledger_status"] == "awaiting_approval"
    return Refund.objects.get(pk=body["id"])


@pytest.mark.django_db(transaction=True)
def test_the_stripe_client_cancels_a_waiting_refund(stripe_client, api_key):
    key = ApiKey.objects.get(prefix=api_key[:PREFIX_LENGTH])
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=100, per_day=100)
    charge = ChargeFactory(amount=5_000)
    refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 2_000})

    canceled = stripe_client.v1.refunds.cancel(refund.id)

    assert (canceled.status, canceled.ledger_status, canceled.failure_reason) == (
        "canceled",
        "canceled",
        "merchant_request",
    )
    assert stripe_client.v1.charges.retrieve(charge.id).amount_refunded == 0
    with pytest.raises(stripe.InvalidRequestError) as again:
        stripe_client.v1.refunds.cancel(refund.id)
    assert (again.value.http_status, again.value.code) == (400, "refund_not_cancelable")


@pytest.mark.django_db
class TestCancel:
    def test_it_releases_the_amount_and_tells_refund_updated(self, api, waiting):
        response = cancel(api, waiting.id)

        assert response.status_code == 200, response.content
        assert response.json()["status"] == "canceled"
        waiting.refresh_from_db()
        assert waiting.status == "canceled" and waiting.charge.amount_refunded == 0
        released = LedgerEntry.objects.get(refund=waiting, kind="refund_released")
        assert released.amount == 2_000 and released.memo.startswith("canceled:")
        assert waiting.decided_by == waiting.actor  # the requester took it back
        update = Event.objects.get(refund=waiting, type="refund.updated")
        assert update.previous_attributes == {
            "destination_details": {
                "card": {"reference_status": "pending", "type": "pending"},
                "type": "card",
            },
            "failure_reason": None,
            "ledger_status": "awaiting_approval",
            "status": "pending",
        }
        assert ProviderRequest.objects.count() == 0  # never sent

    def test_another_write_key_may_not_cancel_it_nor_a_read_only_key(self, client, waiting):
        other = create_api_key(name="ops")[1]
        reader = create_api_key(name="reports", read_only=True)[1]
        before = snapshot(waiting)

        read_only = cancel(client, waiting.id, HTTP_AUTHORIZATION=f"Bearer {reader}")
        refused = cancel(client, waiting.id, HTTP_AUTHORIZATION=f"Bearer {other}")

        assert read_only.status_code == 403
        assert refused.status_code == 400, refused.content
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "refund_not_cancelable")
        assert "asked for it" in error["message"]
        assert snapshot(waiting) == before

    def test_the_key_that_asked_cancels_it_and_the_record_names_that_key(
        self, api, api_key, waiting
    ):
        label = f"api_key:{api_key[:PREFIX_LENGTH]}"

        response = cancel(api, waiting.id)

        assert response.status_code == 200, response.content
        waiting.refresh_from_db()
        assert (waiting.status, waiting.decided_by) == ("canceled", label)
        assert waiting.decision_note == "canceled by its requester"
        released = LedgerEntry.objects.get(refund=waiting, kind="refund_released")
        assert released.actor == label


def snapshot(refund: Refund) -> tuple:
    """What a refused cancel must leave as it was: the refund, its charge, the books."""
    refund.refresh_from_db()
    refund.charge.refresh_from_db()
    return (
        refund.status,
        refund.decided_by,
        refund.charge.amount_refunded,
        LedgerEntry.objects.count(),
        Event.objects.count(),
    )


@pytest.fixture
def asked_by_a_person(django_user_model) -> Refund:
    """$20.00 asked for in the admin by a support agent over their $10.00 limit: waiting
    for a lead."""
    agent = staff(django_user_model, "agent", migration_group(AGENTS_MIGRATION))
    RefundLimit.objects.create(user=agent, currency="usd", per_refund=1_000, per_day=5_000)
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(
        RefundRequest(charge_id=charge.pk, amount=2_000, actor=agent, source=Refund.Source.ADMIN)
    ).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    return refund


@pytest.mark.django_db
class TestWhoMayCancel:
    """Only its requester (the same key, or the same person) or a support lead."""

    def test_no_key_may_cancel_a_refund_a_person_asked_for(self, api, asked_by_a_person):
        before = snapshot(asked_by_a_person)

        response = cancel(api, asked_by_a_person.id)

        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "refund_not_cancelable"
        assert snapshot(asked_by_a_person) == before
        assert asked_by_a_person.status == Refund.Status.AWAITING_APPROVAL

    def test_the_person_who_asked_cancels_it_and_is_named(self, asked_by_a_person):
        agent = asked_by_a_person.created_by

        canceled = cancel_refund(refund_id=asked_by_a_person.id, actor=agent)

        canceled.refresh_from_db()
        assert (canceled.status, canceled.decided_by) == ("canceled", "user:agent")
        assert canceled.decision_note == "canceled by its requester"
        assert canceled.charge.amount_refunded == 0

    def test_a_lead_cancels_it_and_is_named(self, django_user_model, asked_by_a_person):
        lead = staff(django_user_model, "lead", migration_group(LEADS_MIGRATION))

        canceled = cancel_refund(refund_id=asked_by_a_person.id, actor=lead)

        canceled.refresh_from_db()
        assert (canceled.status, canceled.decided_by) == ("canceled", "user:lead")
        assert canceled.decision_note == "canceled by a support lead"
        released = LedgerEntry.objects.get(refund=canceled, kind="refund_released")
        assert released.actor == "user:lead"

    def test_another_person_who_is_no_lead_may_not(self, django_user_model, asked_by_a_person):
        colleague = staff(django_user_model, "colleague", migration_group(AGENTS_MIGRATION))
        before = snapshot(asked_by_a_person)

        with pytest.raises(RefundNotCancelable):
            cancel_refund(refund_id=asked_by_a_person.id, actor=colleague)

        assert snapshot(asked_by_a_person) == before

    def test_a_person_may_not_cancel_a_keys_refund_by_its_label(self, waiting):
        """A label names a key, never a person: the key's label is no person's word."""
        with pytest.raises(RefundNotCancelable):
            cancel_refund(refund_id=waiting.id, actor="user:agent")
        waiting.refresh_from_db()
        assert waiting.status == Refund.Status.AWAITING_APPROVAL

    @pytest.mark.parametrize("behaviour", ["succeed", "decline", "timeout"])
    def test_any_other_status_is_400_and_changes_nothing(self, api, behaviour):
        charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": behaviour})
        refund = api.post("/v1/refunds", f"charge={charge.id}&amount=100", content_type=FORM).json()
        before = (Refund.objects.get(pk=refund["id"]).status, LedgerEntry.objects.count())

        response = cancel(api, refund["id"])

        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "refund_not_cancelable" and refund["id"] in error["message"]
        assert (Refund.objects.get(pk=refund["id"]).status, LedgerEntry.objects.count()) == before

    def test_an_unknown_refund_is_404_and_a_parameter_is_refused(self, api, waiting):
        assert cancel(api, "re_nothing").status_code == 404
        bad = api.post(f"/v1/refunds/{waiting.id}/cancel", "amount=1", content_type=FORM)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "parameter_unknown"
        waiting.refresh_from_db()
        assert waiting.status == "awaiting_approval"


@pytest.mark.django_db
class TestTheChargesRefundsEndpoint:
    def test_it_creates_a_refund_of_the_charge_in_the_path(self, api):
        charge = ChargeFactory(amount=5_000)

        made = api.post(
            f"/v1/charges/{charge.id}/refunds",
            "amount=700&reason=duplicate",
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="legacy-1",
        )
        again = api.post(
            f"/v1/charges/{charge.id}/refunds",
            "amount=700&reason=duplicate",
            content_type=FORM,
            HTTP_IDEMPOTENCY_KEY="legacy-1",
        )

        assert made.status_code == 200, made.content
        body = made.json()
        assert (body["charge"], body["amount"], body["status"]) == (charge.id, 700, "succeeded")
        assert again.json()["id"] == body["id"] and again["Idempotent-Replayed"] == "true"
        listed = api.get(f"/v1/charges/{charge.id}/refunds").json()["data"]
        assert [r["id"] for r in listed] == [body["id"]]

    def test_the_same_money_rules_and_a_404_for_an_unknown_charge(self, api):
        charge = ChargeFactory(amount=500)

        too_much = api.post(f"/v1/charges/{charge.id}/refunds", "amount=501", content_type=FORM)
        named = api.post(
            f"/v1/charges/{charge.id}/refunds", f"charge={charge.id}", content_type=FORM
        )
        missing = api.post("/v1/charges/ch_nothing/refunds", "amount=1", content_type=FORM)

        assert too_much.status_code == 400
        assert too_much.json()["error"]["code"] == "amount_too_large"
        assert named.json()["error"]["code"] == "parameter_unknown"
        assert missing.status_code == 404
        assert not Refund.objects.exists()
