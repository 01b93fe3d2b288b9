"""A signed provider event acts only on the refund (or charge) it is: the one holding its
provider id, or, while none holds it, the one its metadata names if its charge, amount and
currency agree. Anything else is acknowledged, stored and changes nothing. Every event
type the endpoint takes goes through that one check (`provider_events._not_this`)."""

from __future__ import annotations

import logging

import pytest

from ledger_app.charges.services import create_charge
from ledger_app.ledger.drift import find_ledger_drift
from ledger_app.models import Charge, Event, LedgerEntry, ProviderEvent, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants
from tests.provider_webhook import SECRET, charge_object, event_of, post_event, refund_object

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants", "inline_dispatch"),
]

REFUND_EVENTS = ["refund.updated", "refund.failed", "charge.refund.updated"]
CHARGE_EVENTS = ["charge.succeeded", "charge.failed", "charge.updated"]


@pytest.fixture(autouse=True)
def _webhook_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.fixture
def yen_refund():
    """A succeeded refund of ¥2,500, which the provider knows by its own id."""
    charge = ChargeFactory(amount=5_000, currency="jpy")
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=2_500)).item
    assert refund.status == Refund.Status.SUCCEEDED and refund.provider_refund_id
    return refund


@pytest.fixture
def other_charge():
    return ChargeFactory(amount=9_000, currency="jpy")


@pytest.fixture
def unanswered_refund():
    """A refund the provider took as pending: unknown here, no provider id yet."""
    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "pending_then_succeed"})
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item
    assert refund.status == Refund.Status.UNKNOWN and not refund.provider_refund_id
    return refund


@pytest.fixture
def unanswered_charge():
    """A capture whose answer never came: unknown here, no provider id yet."""
    charge = create_charge(amount=4_000, currency="usd", metadata={"simulate_charge": "timeout"})
    assert charge.item.status == Charge.Status.UNKNOWN and not charge.item.provider_charge_id
    return charge.item


@pytest.fixture
def answered_charge():
    charge = create_charge(amount=4_000, currency="usd").item
    assert charge.status == Charge.Status.SUCCEEDED and charge.provider_charge_id
    return charge


def state(item: Refund | Charge) -> tuple:
    """Everything an event could have moved: the item, its charge's books, the ledger and
    the events told to clients."""
    item.refresh_from_db()
    charge = item.charge if isinstance(item, Refund) else item
    charge.refresh_from_db()
    return (
        item.status,
        item.provider_id,
        item.status_detail,
        charge.amount_refunded,
        LedgerEntry.objects.count(),
        Event.objects.count(),
    )


def assert_acknowledged_stored_unchanged(answer, event_id: str, before: tuple, item) -> None:
    assert answer.status_code == 200, answer.content
    assert answer.json()["outcome"].startswith("ignored: ")
    stored = ProviderEvent.objects.get(pk=event_id)
    assert stored.outcome == answer.json()["outcome"]
    assert state(item) == before


class TestFinding5:
    def test_an_event_about_another_refund_naming_ours_leaves_ours_succeeded(
        self, client, yen_refund, other_charge, caplog
    ):
        """Finding 5: a refund event with another id, another charge and amount 1, whose
        metadata names a succeeded ¥2,500 refund, failed it, released its amount and
        overwrote its provider id."""
        before = state(yen_refund)
        provider_id = yen_refund.provider_refund_id
        obj = refund_object(
            yen_refund,
            "failed",
            id="re_someoneElsesRefund0000001",
            charge=other_charge.provider_reference,
            amount=1,
        )

        with caplog.at_level(logging.WARNING, logger="ledger_app.provider_events"):
            answer = post_event(client, event_of("evt_finding5", "refund.failed", obj))

        assert_acknowledged_stored_unchanged(answer, "evt_finding5", before, yen_refund)
        assert yen_refund.status == Refund.Status.SUCCEEDED
        assert yen_refund.provider_refund_id == provider_id
        yen_refund.charge.refresh_from_db()
        assert yen_refund.charge.amount_refunded == 2_500
        assert list(find_ledger_drift()) == []
        assert_ledger_invariants()
        [warning] = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "ledger_app.provider_events"
        ]  # a process's first request may also log its start warnings (an open /metrics)
        assert "evt_finding5" in warning.getMessage()
        assert f"is {provider_id} at the provider" in warning.getMessage()

    def test_a_retry_of_that_event_is_a_duplicate(self, client, yen_refund, other_charge):
        obj = refund_object(yen_refund, "failed", id="re_someoneElsesRefund0000001", amount=1)
        post_event(client, event_of("evt_again", "refund.failed", obj))

        again = post_event(client, event_of("evt_again", "refund.failed", obj))

        assert again.status_code == 200
        assert again.json()["outcome"] == "duplicate: already applied"
        assert ProviderEvent.objects.filter(pk="evt_again").count() == 1


@pytest.mark.parametrize("event_type", REFUND_EVENTS)
class TestRefundEventsWithAProviderId:
    """The refund the provider knows by its id; the event says it failed."""

    @pytest.mark.parametrize(
        "changed",
        [
            pytest.param({"id": "re_anotherProviderRefund001"}, id="another_provider_id"),
            pytest.param({"amount": 2_499}, id="another_amount"),
            pytest.param({"currency": "usd"}, id="another_currency"),
            pytest.param({"charge": "ch_anotherChargeAltogether01"}, id="another_charge"),
            pytest.param({"amount": "2500"}, id="amount_as_text"),
        ],
    )
    def test_one_that_disagrees_changes_nothing(self, client, yen_refund, event_type, changed):
        before = state(yen_refund)
        obj = refund_object(yen_refund, "failed", **changed)

        answer = post_event(client, event_of("evt_disagrees", event_type, obj))

        assert_acknowledged_stored_unchanged(answer, "evt_disagrees", before, yen_refund)

    def test_its_provider_id_with_metadata_naming_another_refund_changes_neither(
        self, client, yen_refund, unanswered_refund, event_type
    ):
        before = (state(yen_refund), state(unanswered_refund))
        obj = refund_object(
            yen_refund, "failed", metadata={"ledger_refund_id": unanswered_refund.id}
        )

        answer = post_event(client, event_of("evt_names_another", event_type, obj))

        assert answer.status_code == 200
        assert answer.json()["outcome"].startswith("ignored: ")
        assert (state(yen_refund), state(unanswered_refund)) == before

    def test_the_refund_it_is_settles(self, client, yen_refund, event_type):
        obj = refund_object(yen_refund, "failed")

        answer = post_event(client, event_of("evt_it_is", event_type, obj))

        assert answer.status_code == 200
        assert answer.json()["outcome"] == f"refund {yen_refund.id}: succeeded -> failed"
        yen_refund.refresh_from_db()
        yen_refund.charge.refresh_from_db()
        assert yen_refund.status == Refund.Status.FAILED
        assert yen_refund.charge.amount_refunded == 0

    def test_its_provider_id_alone_is_enough(self, client, yen_refund, event_type):
        """Which refund it is, the provider's id says; facts left out are no conflict."""
        obj = {"id": yen_refund.provider_refund_id, "object": "refund", "status": "failed"}

        post_event(client, event_of("evt_bare", event_type, obj))

        yen_refund.refresh_from_db()
        assert yen_refund.status == Refund.Status.FAILED


@pytest.mark.parametrize("event_type", REFUND_EVENTS)
class TestRefundEventsByMetadata:
    """A refund the provider's answer never reached: only its metadata can name it, and
    then only with its own charge, amount and currency."""

    @pytest.mark.parametrize(
        "changed",
        [
            pytest.param({"charge": "ch_anotherChargeAltogether01"}, id="another_charge"),
            pytest.param({"charge": None}, id="no_charge"),
            pytest.param({"amount": 1}, id="another_amount"),
            pytest.param({"amount": None}, id="no_amount"),
            pytest.param({"currency": "eur"}, id="another_currency"),
        ],
    )
    def test_one_that_disagrees_changes_nothing(
        self, client, unanswered_refund, event_type, changed
    ):
        before = state(unanswered_refund)
        obj = refund_object(unanswered_refund, "succeeded", **changed)

        answer = post_event(client, event_of("evt_disagrees", event_type, obj))

        assert answer.status_code == 200
        assert state(unanswered_refund) == before
        assert ProviderEvent.objects.filter(pk="evt_disagrees").exists()

    @pytest.mark.allows_drift("disagrees_with_provider")  # held: verify_ledger reports it
    def test_one_with_no_metadata_is_held_not_adopted_beside_it(
        self, client, unanswered_refund, event_type
    ):
        """Without our metadata it may be this very refund, or another made at the
        provider: adopting it could count the money twice, so the charge waits for a lead."""
        before = state(unanswered_refund)
        obj = refund_object(unanswered_refund, "succeeded", metadata={})

        answer = post_event(client, event_of("evt_no_metadata", event_type, obj))

        assert "disagrees with the provider" in answer.json()["outcome"]
        assert state(unanswered_refund) == before  # no entry or event written
        assert Refund.objects.count() == 1
        held = Charge.objects.get(pk=unanswered_refund.charge_id).provider_disagreement or {}
        assert [item["id"] for item in held["held"]] == [obj["id"]]

    def test_metadata_naming_a_refund_that_has_a_provider_id_changes_nothing(
        self, client, yen_refund, event_type
    ):
        before = state(yen_refund)
        obj = refund_object(yen_refund, "failed", id="re_notTheOneItHolds0000001")

        answer = post_event(client, event_of("evt_has_one", event_type, obj))

        assert_acknowledged_stored_unchanged(answer, "evt_has_one", before, yen_refund)

    def test_the_refund_it_is_settles_and_keeps_the_provider_id(
        self, client, unanswered_refund, event_type
    ):
        obj = refund_object(unanswered_refund, "succeeded", id="re_providerSaysSucceeded01")

        answer = post_event(client, event_of("evt_by_metadata", event_type, obj))

        assert answer.json()["outcome"] == f"refund {unanswered_refund.id}: unknown -> succeeded"
        unanswered_refund.refresh_from_db()
        assert unanswered_refund.status == Refund.Status.SUCCEEDED
        assert unanswered_refund.provider_refund_id == "re_providerSaysSucceeded01"


@pytest.mark.parametrize("event_type", CHARGE_EVENTS)
class TestChargeEvents:
    @pytest.mark.parametrize(
        "changed",
        [
            pytest.param({"amount": 3_999}, id="another_amount"),
            pytest.param({"currency": "eur"}, id="another_currency"),
            pytest.param({"amount": None}, id="no_amount"),
            pytest.param(
                {"metadata": {"ledger_charge_id": "ch_notThisOne000000000001"}}, id="other"
            ),
        ],
    )
    def test_one_by_metadata_that_disagrees_changes_nothing(
        self, client, unanswered_charge, event_type, changed
    ):
        before = state(unanswered_charge)
        obj = charge_object(unanswered_charge, "succeeded", **changed)

        answer = post_event(client, event_of("evt_disagrees", event_type, obj))

        assert answer.status_code == 200
        assert state(unanswered_charge) == before
        assert ProviderEvent.objects.filter(pk="evt_disagrees").exists()

    def test_metadata_naming_a_charge_that_has_a_provider_id_changes_nothing(
        self, client, answered_charge, event_type
    ):
        before = state(answered_charge)
        obj = charge_object(answered_charge, "failed", id="ch_notTheOneItHolds0000001")

        answer = post_event(client, event_of("evt_has_one", event_type, obj))

        assert_acknowledged_stored_unchanged(answer, "evt_has_one", before, answered_charge)

    def test_another_amount_under_its_own_provider_id_changes_nothing(
        self, client, unanswered_charge, event_type
    ):
        Charge.objects.filter(pk=unanswered_charge.pk).update(provider_charge_id="ch_known01")
        unanswered_charge.refresh_from_db()
        before = state(unanswered_charge)
        obj = charge_object(unanswered_charge, "succeeded", amount=1)

        answer = post_event(client, event_of("evt_amount", event_type, obj))

        assert_acknowledged_stored_unchanged(answer, "evt_amount", before, unanswered_charge)

    def test_the_charge_it_is_settles(self, client, unanswered_charge, event_type):
        obj = charge_object(unanswered_charge, "succeeded", id="ch_providerSaysCaptured001")

        answer = post_event(client, event_of("evt_captured", event_type, obj))

        assert answer.json()["outcome"] == f"charge {unanswered_charge.id}: unknown -> succeeded"
        unanswered_charge.refresh_from_db()
        assert unanswered_charge.status == Charge.Status.SUCCEEDED
        assert unanswered_charge.provider_charge_id == "ch_providerSaysCaptured001"
