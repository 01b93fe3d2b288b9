"""POST /webhooks/stripe at its edges: a signature dated ahead is refused like a bad one;
an event's ids are checked before anything is read or written; the event is stored in the
same transaction as its effect, so it is applied at most once and one whose effect failed
is not marked applied. No input, signed or not, gets a 500."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import OperationalError, connection
from django.test import Client

from ledger_app.mirror import events_in as provider_events
from ledger_app.models import Event, LedgerEntry, ProviderEvent, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.provider_webhook import SECRET, event_of, post_body, post_event, refund_object

pytestmark = pytest.mark.usefixtures("inline_dispatch")

LONG = "x" * 5_000


@pytest.fixture(autouse=True)
def _webhook_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.fixture
def succeeded_refund(db):
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item
    assert refund.status == Refund.Status.SUCCEEDED
    return refund


def written(refund: Refund) -> tuple:
    refund.refresh_from_db()
    refund.charge.refresh_from_db()
    return (
        refund.status,
        refund.provider_refund_id,
        refund.charge.amount_refunded,
        LedgerEntry.objects.count(),
        Event.objects.count(),
        ProviderEvent.objects.count(),
    )


@pytest.mark.django_db
class TestSignatureTimestamps:
    def test_a_signature_dated_an_hour_ahead_is_refused_and_writes_nothing(
        self, client, succeeded_refund
    ):
        """Finding 5: the `stripe` package checks only the past; this was applied."""
        before = written(succeeded_refund)
        event = event_of("evt_future", "refund.failed", refund_object(succeeded_refund, "failed"))

        answer = post_event(client, event, at=int(time.time()) + 3_600)

        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "signature_invalid"
        assert written(succeeded_refund) == before

    def test_six_minutes_ahead_is_refused_too(self, client, succeeded_refund):
        event = event_of("evt_future", "refund.failed", refund_object(succeeded_refund, "failed"))

        answer = post_event(client, event, at=int(time.time()) + 360)

        assert answer.status_code == 400
        assert not ProviderEvent.objects.exists()

    def test_a_clock_a_little_ahead_is_within_the_tolerance(self, client, succeeded_refund):
        event = event_of("evt_near", "refund.failed", refund_object(succeeded_refund, "failed"))

        answer = post_event(client, event, at=int(time.time()) + 200)

        assert answer.status_code == 200
        assert ProviderEvent.objects.filter(pk="evt_near").exists()

    def test_a_signed_body_that_is_not_json_is_400(self, client, db):
        answer = post_body(client, b"{not json")

        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "body_invalid"
        assert not ProviderEvent.objects.exists()


@pytest.mark.django_db
class TestEventIds:
    """Finding 6: a signed event with a 5,000-character id or a NUL in it was settled
    before its id was stored (then 500): the provider would resend it forever, and each
    resend would settle again. Now it is acknowledged (no resend could ever be applied:
    its id can never be stored) and nothing is read or written."""

    @pytest.mark.parametrize(
        "event_id",
        [
            pytest.param("evt_" + LONG, id="5000_characters"),
            pytest.param("evt_nul\x00here", id="nul"),
            pytest.param("evt_new\nline", id="newline"),
            pytest.param("evt_" + "a" * 252, id="256_characters"),
            pytest.param("re_notAnEvent", id="not_an_event_id"),
            pytest.param("", id="empty"),
            pytest.param(12345, id="a_number"),
            pytest.param(None, id="none"),
        ],
    )
    def test_an_event_id_that_is_no_event_id_is_acknowledged_and_changes_nothing(
        self, client, succeeded_refund, event_id
    ):
        before = written(succeeded_refund)
        event = event_of("", "refund.failed", refund_object(succeeded_refund, "failed"))
        event["id"] = event_id

        answer = post_event(client, event)

        assert answer.status_code == 200
        assert answer.json()["outcome"] == "ignored: not a provider event id"
        assert written(succeeded_refund) == before

    def test_the_longest_event_id_is_stored(self, client, succeeded_refund):
        event_id = "evt_" + "a" * 251
        event = event_of(event_id, "refund.failed", refund_object(succeeded_refund, "failed"))

        answer = post_event(client, event)

        assert answer.status_code == 200
        assert ProviderEvent.objects.filter(pk=event_id).exists()
        assert written(succeeded_refund)[0] == Refund.Status.FAILED

    @pytest.mark.parametrize(
        "body",
        [
            pytest.param(b"[1, 2]", id="a_list"),
            pytest.param(b'"an event"', id="a_string"),
            pytest.param(b"[" * 500 + b"]" * 500, id="nested_500_deep"),
        ],
    )
    def test_a_signed_body_that_is_no_event_is_acknowledged(self, client, db, body):
        answer = post_body(client, body)

        assert answer.status_code == 200
        assert not ProviderEvent.objects.exists()

    def test_an_event_nested_deeper_than_any_event_is_acknowledged_and_not_stored(self, client, db):
        deep: dict = {}
        for _ in range(200):
            deep = {"inner": deep}
        answer = post_event(client, event_of("evt_deep", "refund.updated", deep))

        assert answer.status_code == 200
        assert not ProviderEvent.objects.exists()


@pytest.mark.django_db
class TestObjectIds:
    """The ids an event carries are checked before any query names them; the event itself
    is stored (its id is good), and nothing changes."""

    @pytest.mark.parametrize(
        "changed",
        [
            pytest.param({"id": LONG}, id="object_id_5000"),
            pytest.param({"id": "re_nul\x00"}, id="object_id_nul"),
            pytest.param({"id": ""}, id="object_id_empty"),
            pytest.param({"id": None}, id="object_id_missing"),
            pytest.param({"id": ["re_list"]}, id="object_id_list"),
            pytest.param({"charge": "ch_\x00"}, id="charge_nul"),
            pytest.param({"charge": LONG}, id="charge_5000"),
            pytest.param({"charge": {"id": "ch_\x00"}}, id="expanded_charge_nul"),
            pytest.param({"metadata": {"ledger_refund_id": "re_\x00"}}, id="metadata_nul"),
            pytest.param({"metadata": {"ledger_refund_id": LONG}}, id="metadata_5000"),
            pytest.param({"metadata": {"ledger_refund_id": 7}}, id="metadata_number"),
            pytest.param({"object": {"refund": 1}}, id="object_kind_a_dict"),
        ],
    )
    def test_a_bad_id_in_the_object_is_stored_acknowledged_and_changes_nothing(
        self, client, succeeded_refund, changed
    ):
        before = written(succeeded_refund)
        obj = refund_object(succeeded_refund, "failed", **changed)

        answer = post_event(client, event_of("evt_bad_object", "refund.failed", obj))

        assert answer.status_code == 200
        assert answer.json()["outcome"].startswith("ignored: ")
        assert "\x00" not in ProviderEvent.objects.get(pk="evt_bad_object").outcome
        assert written(succeeded_refund)[:5] == before[:5]

    def test_text_the_database_cannot_store_is_kept_replaced(self, client, succeeded_refund):
        """A NUL or a lone surrogate anywhere in a good event: the event is applied and
        stored, the text replaced (PostgreSQL refuses NUL)."""
        obj = refund_object(succeeded_refund, "failed", failure_reason="card\x00closed\ud800")
        event = event_of("evt_odd_text", "refund.failed\x00", obj)
        event["note\x00"] = "\x00"

        answer = post_event(client, event)

        assert answer.status_code == 200, answer.content
        stored = ProviderEvent.objects.get(pk="evt_odd_text")
        assert "\x00" not in json.dumps(stored.payload) and "\x00" not in stored.type
        succeeded_refund.refresh_from_db()
        assert succeeded_refund.status == Refund.Status.FAILED
        assert "\x00" not in succeeded_refund.status_detail


@pytest.mark.django_db
class TestStoredWithItsEffect:
    def test_an_event_whose_effect_failed_is_not_stored_and_its_resend_applies(
        self, client, succeeded_refund, monkeypatch
    ):
        event = event_of("evt_retry", "refund.failed", refund_object(succeeded_refund, "failed"))
        before = written(succeeded_refund)

        def database_gone(**kwargs):
            raise OperationalError("the database went away")

        with monkeypatch.context() as patched:
            patched.setattr(provider_events, "settle_locked_refund", database_gone)
            first = post_event(client, event)
        after_first = written(succeeded_refund)
        resent = post_event(client, event)

        assert first.status_code == 503
        assert after_first == before
        assert resent.status_code == 200
        assert resent.json()["outcome"] == f"refund {succeeded_refund.id}: succeeded -> failed"
        assert ProviderEvent.objects.filter(pk="evt_retry").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_event_delivered_twice_at_once_is_applied_once(succeeded_refund):
    event = event_of("evt_twice", "refund.failed", refund_object(succeeded_refund, "failed"))
    body = json.dumps(event).encode()
    barrier = threading.Barrier(4)
    answers = []

    def deliver():
        try:
            barrier.wait()
            answers.append(post_body(Client(), body).json()["outcome"])
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    applied = f"refund {succeeded_refund.id}: succeeded -> failed"
    assert sorted(answers) == sorted([applied] + ["duplicate: already applied"] * 3)
    assert LedgerEntry.objects.filter(refund=succeeded_refund, kind="refund_released").count() == 1
    assert Event.objects.filter(refund=succeeded_refund, type="refund.failed").count() == 1
