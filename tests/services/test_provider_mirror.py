"""The provider mirror, through the door its webhooks come in by (POST /webhooks/stripe,
signed): charges the provider made arrive by themselves, refunds made at the provider are
adopted into the ledger, and one that does not fit blocks the charge instead of being
applied in part (ledger_app/mirror)."""

from __future__ import annotations

import re

import pytest

from ledger_app import errors
from ledger_app.access.api_keys import create_api_key
from ledger_app.mirror.adoption import apply_held
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.provider.dispatch import process_pending_refunds, reconcile_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.concurrency import run_at_once
from tests.invariants import assert_ledger_invariants
from tests.provider_webhook import (
    ADOPTED,
    CREATED,
    arrive,
    event_of,
    payment_intent,
    provider_charge,
    provider_refund,
    tell,
    told_types,
)

pytestmark = pytest.mark.usefixtures("inline_dispatch", "provider_webhook_secret")


@pytest.fixture
def arrived(client, db) -> Charge:
    return arrive(client)


@pytest.mark.django_db
class TestChargesArrive:
    def test_a_charge_the_provider_made_arrives_refundable_within_the_request(
        self, client, viewer_client
    ):
        outcome = tell(client, "charge.succeeded", provider_charge(), event_id="evt_1")

        assert outcome == "charge ch_3MadeAtTheProvider arrived from the provider (succeeded)"
        charge = Charge.objects.get(pk="ch_3MadeAtTheProvider")
        kept = (charge.amount, charge.currency, charge.status, charge.customer)
        assert kept == (10_000, "usd", "succeeded", "cus_Nf4Customer")
        assert (charge.payment_intent, charge.description) == (
            "pi_3MadeAtTheProvider",
            "Order 1041",
        )
        assert charge.metadata == {"order": "1041"} and charge.created_at.timestamp() == CREATED
        assert charge.provider_idempotency_key is None  # never sent from here
        entries = LedgerEntry.objects.filter(charge=charge).values_list("kind", "amount")
        assert list(entries) == [("charge_succeeded", 10_000)]
        assert told_types(charge.pk) == ["charge.succeeded"]
        api_key = create_api_key(name="client")[1]
        shown = client.get(f"/v1/charges/{charge.pk}", HTTP_AUTHORIZATION=f"Bearer {api_key}")
        shown = shown.json()
        assert (shown["id"], shown["amount"], shown["refunded"]) == (charge.pk, 10_000, False)
        listed = viewer_client.get("/admin/ledger_app/charge/?q=ch_3MadeAtTheProvider")
        assert charge.pk in listed.content.decode()
        page = viewer_client.get(f"/admin/ledger_app/charge/{charge.pk}/change/")
        assert page.status_code == 200 and "cus_Nf4Customer" in page.content.decode()
        refund = create_refund(RefundRequest(charge_id=charge.pk, amount=2_500)).item
        assert refund.status == Refund.Status.SUCCEEDED
        assert ProviderRefund.objects.get().charge_reference == charge.pk

    def test_the_same_charge_told_again_arrives_once(self, client, arrived):
        outcome = tell(client, "charge.updated", provider_charge(), event_id="evt_again")
        again = tell(client, "payment_intent.succeeded", payment_intent(), event_id="evt_pi")

        assert outcome == again == f"charge {arrived.pk}: succeeded -> succeeded"
        assert Charge.objects.count() == 1
        assert LedgerEntry.objects.filter(kind="charge_succeeded").count() == 1
        assert told_types(arrived.pk) == ["charge.succeeded"]

    def test_a_payment_intent_brings_its_latest_charge(self, client, db):
        outcome = tell(client, "payment_intent.succeeded", payment_intent(), event_id="evt_pi")

        charge = Charge.objects.get(pk="ch_3MadeAtTheProvider")
        assert "arrived" in outcome and charge.payment_intent == "pi_3MadeAtTheProvider"
        assert (charge.amount, charge.status, charge.customer) == (
            10_000,
            "succeeded",
            "cus_Nf4Customer",
        )

    def test_an_authorised_charge_arrives_pending_and_its_capture_makes_it_refundable(
        self, client, db
    ):
        uncaptured = provider_charge(captured=False, amount_captured=0)
        tell(client, "charge.succeeded", uncaptured, event_id="evt_auth")
        charge = Charge.objects.get()
        assert charge.status == Charge.Status.PENDING and not charge.is_refundable
        with pytest.raises(errors.ChargeNotRefundable):
            create_refund(RefundRequest(charge_id=charge.pk, amount=100))
        assert not ProviderRequest.objects.exists()

        outcome = tell(client, "charge.captured", provider_charge(), event_id="evt_capture")

        charge.refresh_from_db()
        assert outcome == f"charge {charge.pk}: pending -> succeeded"
        assert charge.status == Charge.Status.SUCCEEDED and charge.is_refundable
        assert LedgerEntry.objects.filter(charge=charge, kind="charge_succeeded").count() == 1

    def test_a_partly_captured_charge_arrives_as_what_was_taken(self, client, db):
        tell(client, "charge.captured", provider_charge(amount_captured=7_000), event_id="evt_p")

        assert Charge.objects.get().amount == 7_000

    def test_a_failed_charge_arrives_failed_with_nothing_to_refund(self, client, db):
        tell(client, "charge.failed", provider_charge(status="failed"), event_id="evt_f")

        charge = Charge.objects.get()
        assert charge.status == Charge.Status.FAILED and not LedgerEntry.objects.exists()
        assert told_types(charge.pk) == ["charge.failed"]

    @pytest.mark.parametrize(
        ("changed", "said"),
        [
            ({"amount": 0}, "is not one"),
            ({"amount": "10000", "amount_captured": None}, "is not one"),
            ({"amount": 2**63, "amount_captured": 2**63}, "is not one"),
            ({"currency": "zzz"}, "not one we know"),
            ({"id": "ch_" + "x" * 70}, "is not an id"),
            ({"id": "ch 1"}, "is not an id"),
            ({"status": "refunded"}, "not arrived"),
        ],
    )
    def test_a_charge_that_is_not_one_changes_nothing(self, client, db, changed, said):
        outcome = tell(client, "charge.succeeded", provider_charge(**changed), event_id="evt_bad")

        assert outcome.startswith("ignored:") and said in outcome, outcome
        assert not Charge.objects.exists() and not LedgerEntry.objects.exists()

    def test_unusable_metadata_does_not_stop_the_charge(self, client, db):
        tell(
            client, "charge.succeeded", provider_charge(metadata={"k": {"n": 1}}), event_id="evt_m"
        )

        assert Charge.objects.get().metadata == {}


@pytest.mark.django_db
class TestRefundsMadeAtTheProviderAreAdopted:
    def test_part_refunded_at_the_provider_leaves_the_books_right(self, client, arrived):
        outcome = tell(client, "refund.created", provider_refund(), event_id="evt_r1")

        adopted = Refund.objects.get()
        assert outcome == ADOPTED.format(adopted.pk)
        fields = (adopted.source, adopted.actor, adopted.provider_refund_id, adopted.amount)
        assert fields == ("provider", "provider", "re_3MadeInTheDashboard", 6_000)
        assert adopted.status == "succeeded" and adopted.reason == "requested_by_customer"
        arrived.refresh_from_db()
        assert (arrived.amount_refunded, arrived.amount_refundable) == (6_000, 4_000)
        kinds = LedgerEntry.objects.filter(refund=adopted).values_list("kind", flat=True)
        assert sorted(kinds) == ["refund_reserved", "refund_succeeded"]
        assert told_types(adopted.pk) == ["refund.created"]
        assert sorted(told_types(arrived.pk)) == ["charge.refunded", "charge.succeeded"]

    def test_the_rest_refunded_here_asks_the_provider_for_the_true_rest(self, client, arrived):
        tell(client, "refund.created", provider_refund(), event_id="evt_r1")

        rest = create_refund(RefundRequest(charge_id=arrived.pk)).item

        assert (rest.amount, rest.status) == (4_000, "succeeded")
        assert list(ProviderRefund.objects.values_list("amount", flat=True)) == [4_000]
        with pytest.raises(errors.ChargeAlreadyRefunded):
            create_refund(RefundRequest(charge_id=arrived.pk, amount=1))

    def test_one_provider_refund_told_three_ways_is_adopted_once(self, client, arrived):
        refunded = provider_charge(amount_refunded=6_000, refunds={"data": [provider_refund()]})
        tell(client, "refund.created", provider_refund(), event_id="evt_r1")
        tell(client, "charge.refunded", refunded, event_id="evt_r2")
        tell(client, "charge.refund.updated", provider_refund(), event_id="evt_r3")

        assert Refund.objects.count() == 1
        assert Charge.objects.get().amount_refunded == 6_000

    def test_a_charge_arriving_with_its_refunds_adopts_them(self, client, db):
        refunds = {"data": [provider_refund(), provider_refund("re_second", amount=1_000)]}
        tell(client, "charge.refunded", provider_charge(refunds=refunds), event_id="evt_c")

        assert Charge.objects.get().amount_refunded == 7_000
        assert Refund.objects.filter(source="provider").count() == 2

    def test_pending_at_the_provider_is_never_sent_and_settles_on_its_word(
        self, client, arrived, settings
    ):
        tell(client, "refund.created", provider_refund(status="pending"), event_id="evt_p")
        adopted = Refund.objects.get()
        assert adopted.status == "pending"
        settings.REFUND_DISPATCH_LEASE_SECONDS = 0  # stale at once: the reconciler's too

        process_pending_refunds()
        reconcile_refunds()

        assert not ProviderRequest.objects.exists()  # nothing here ever sent it
        failed = provider_refund(status="failed", failure_reason="lost_or_stolen_card")
        outcome = tell(client, "refund.failed", failed, event_id="evt_f")
        adopted.refresh_from_db()
        assert outcome == f"refund {adopted.pk}: pending -> failed"
        assert adopted.status == "failed" and Charge.objects.get().amount_refunded == 0

    def test_a_refund_that_failed_at_the_provider_is_not_adopted(self, client, arrived):
        outcome = tell(client, "refund.failed", provider_refund(status="failed"), event_id="evt_e")

        assert "nothing to adopt" in outcome and not Refund.objects.exists()

    @pytest.mark.parametrize(
        ("changed", "said"),
        [
            ({"id": "re_" + "x" * 244}, "is not an id"),  # its provider key would not fit
            ({"id": "re 1"}, "is not an id"),
            ({"charge": {"id": "ch\x00"}}, "is not an id"),
            ({"amount": 0}, "is not one"),
            ({"amount": 6_000.0}, "is not one"),
            ({"amount": True}, "is not one"),
            ({"currency": "us"}, "is not one"),
            ({"status": None}, "has no status"),
        ],
    )
    def test_a_refund_that_is_not_one_changes_nothing(self, client, arrived, changed, said):
        outcome = tell(client, "refund.created", provider_refund(**changed), event_id="evt_bad")

        assert outcome.startswith("ignored:") and said in outcome, outcome
        assert not Refund.objects.exists() and Charge.objects.get().amount_refunded == 0

    def test_our_own_refund_is_settled_not_adopted(self, client, arrived):
        ours = create_refund(RefundRequest(charge_id=arrived.pk, amount=1_000)).item
        told = provider_refund(ours.provider_refund_id, amount=1_000)
        told["metadata"] = {"ledger_refund_id": ours.pk}

        tell(client, "refund.updated", told, event_id="evt_ours")

        assert Refund.objects.get() == ours and Charge.objects.get().amount_refunded == 1_000


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestAtOnce:
    def test_two_events_of_one_provider_refund_and_an_agents_refund(self, client, arrived):
        refunded = provider_charge(amount_refunded=6_000, refunds={"data": [provider_refund()]})

        results = run_at_once(
            [
                lambda: apply_provider_event(
                    event_of("evt_a", "refund.created", provider_refund())
                ),
                lambda: apply_provider_event(event_of("evt_b", "charge.refunded", refunded)),
                lambda: create_refund(RefundRequest(charge_id=arrived.pk, amount=3_000)),
            ]
        )

        assert not [r for r in results if isinstance(r, Exception)], results
        arrived.refresh_from_db()
        if arrived.provider_disagreement:  # told while the agent's refund was unanswered
            apply_held(arrived.pk, actor="user:lead")  # answered now: it fits
        adopted = Refund.objects.filter(provider_refund_id="re_3MadeInTheDashboard")
        assert adopted.count() == 1  # one ledger refund per provider refund
        arrived.refresh_from_db()
        assert arrived.provider_disagreement is None
        assert arrived.amount_refunded == 9_000 and Refund.objects.count() == 2
        assert_ledger_invariants()


@pytest.mark.django_db
def test_the_admin_index_counts_the_refunds_made_at_the_provider(client, arrived, viewer_client):
    """The queue "Refunded at the provider", beside the work waiting, with its count and a
    link to the refund list filtered by that source."""
    tell(client, "refund.created", provider_refund(), event_id="evt_r1")

    page = viewer_client.get("/admin/").content.decode()

    listed = "/admin/ledger_app/refund/?source__exact=provider"
    assert f'<a href="{listed}">Refunded at the provider</a>: <strong' in page
    assert re.search(r"Refunded at the provider</a>: <strong[^>]*>1<", page)
    adopted = Refund.objects.get(provider_refund_id="re_3MadeInTheDashboard")
    assert adopted.pk in viewer_client.get(listed).content.decode()
