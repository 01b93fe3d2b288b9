"""The outbox: every state change of a charge or refund appends its event in the same
transaction, with a pending delivery for each endpoint that wants it; nothing else does."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from ledger_app import errors, faults
from ledger_app.charges.services import create_charge
from ledger_app.models import Event, WebhookDelivery, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund, update_refund_metadata
from tests.factories import ChargeFactory

pytestmark = pytest.mark.sqlite_pass

# What a refund that was pending showed, in the API's terms.
PENDING_BEFORE = {
    "status": "pending",
    "ledger_status": "pending",
    "pending_reason": "processing",
    "destination_details": {
        "card": {"reference_status": "pending", "type": "pending"},
        "type": "card",
    },
}


def types(**filters) -> list[str]:
    return list(
        Event.objects.filter(**filters).order_by("created_at", "id").values_list("type", flat=True)
    )


def endpoint(events: list[str], **fields) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        url="https://hooks.example.com/x", enabled_events=events, secret="whsec_x", **fields
    )


class TestRefundEvents:
    def test_a_refund_tells_of_its_creation_the_charge_and_its_settlement(self, db):
        charge = ChargeFactory(amount=1_000)

        refund = create_refund(
            RefundRequest(charge_id=charge.id, amount=1_000, idempotency_key="k-ev")
        ).item

        assert types(refund=refund) == ["refund.created", "refund.updated"]
        assert types(charge=charge, refund=None) == ["charge.succeeded", "charge.refunded"]
        created = Event.objects.get(type="refund.created")
        assert created.data_object["id"] == refund.id
        assert created.data_object["status"] == "pending"
        assert created.request_idempotency_key == "k-ev"
        assert created.request_id == ""  # no HTTP request made it
        refunded = Event.objects.get(type="charge.refunded")
        assert refunded.previous_attributes == {"amount_refunded": 0, "refunded": False}
        assert refunded.data_object["amount_refunded"] == 1_000
        updated = Event.objects.get(type="refund.updated")
        # in the API's terms: the status, ledger_status and pending_reason it had
        assert updated.previous_attributes == PENDING_BEFORE
        assert updated.data_object["status"] == "succeeded"

    def test_a_decline_is_updated_and_failed(self, db):
        charge = ChargeFactory(metadata={"simulate_refund": "decline"})

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item

        assert types(refund=refund) == ["refund.created", "refund.updated", "refund.failed"]

    def test_a_replay_or_a_refusal_appends_nothing(self, db):
        charge = ChargeFactory(amount=1_000)
        create_refund(RefundRequest(charge_id=charge.id, amount=400, idempotency_key="k-once"))
        before = Event.objects.count()

        create_refund(RefundRequest(charge_id=charge.id, amount=400, idempotency_key="k-once"))
        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id=charge.id, amount=5_000))

        assert Event.objects.count() == before

    def test_a_change_that_rolls_back_leaves_no_event(self, db, monkeypatch):
        charge = ChargeFactory()
        before = Event.objects.count()
        endpoint(["*"])

        def die(point):
            if point == "refund.reserve_locked":
                raise RuntimeError("the process died before commit")

        monkeypatch.setattr(faults, "checkpoint", die)
        with pytest.raises(RuntimeError):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))

        assert Event.objects.count() == before
        assert not WebhookDelivery.objects.exists()

    def test_metadata_update_tells_what_it_was(self, db):
        refund = create_refund(
            RefundRequest(charge_id=ChargeFactory().id, amount=100, metadata={"a": "1"})
        ).item

        update_refund_metadata(refund_id=refund.id, metadata={"b": "2", "a": ""})
        update_refund_metadata(refund_id=refund.id, metadata={"b": "2"})  # no change

        updates = Event.objects.filter(refund=refund, type="refund.updated").order_by("created_at")
        assert [e.previous_attributes for e in updates] == [
            PENDING_BEFORE,
            {"metadata": {"a": "1"}},
        ]
        last = updates.last()
        assert last is not None and last.data_object["metadata"] == {"b": "2"}


class TestChargeEvents:
    @pytest.mark.parametrize(
        ("behaviour", "expected"),
        [("succeed", ["charge.succeeded"]), ("decline", ["charge.failed"]), ("timeout", [])],
    )
    def test_a_capture_tells_how_it_ended(self, db, behaviour, expected):
        charge = create_charge(
            amount=500, currency="usd", metadata={"simulate_charge": behaviour}
        ).item

        assert types(charge=charge) == expected


class TestFanOut:
    def test_each_endpoint_gets_the_events_it_asked_for(self, db):
        everything = endpoint(["*"])
        created_only = endpoint(["refund.created"])
        endpoint(["*"], status=WebhookEndpoint.Status.DISABLED)
        endpoint(["*"], deleted_at=timezone.now())

        create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))

        to = {
            e.id: sorted(
                WebhookDelivery.objects.filter(endpoint=e).values_list("event__type", flat=True)
            )
            for e in WebhookEndpoint.objects.all()
        }
        assert to.pop(everything.id) == [
            "charge.refunded",
            "charge.succeeded",
            "refund.created",
            "refund.updated",
        ]
        assert to.pop(created_only.id) == ["refund.created"]
        assert list(to.values()) == [[], []]
        assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"pending"}


@pytest.mark.django_db
def test_an_object_named_by_several_events_is_rendered_once(monkeypatch):
    from ledger_app.events import services as event_services
    from ledger_app.models import EventType
    from ledger_app.rendering import snapshots

    charge = ChargeFactory()
    real = snapshots.object_snapshot
    calls: list[str] = []

    def counted(obj: Any, **options: Any) -> Any:
        calls.append(obj.pk)
        return real(obj, **options)

    monkeypatch.setattr(event_services, "object_snapshot", counted)
    changes: list[event_services.Change] = [
        (EventType.CHARGE_UPDATED, charge, {"description": "before"}),
        (EventType.CHARGE_REFUNDED, charge, None),
        (EventType.CHARGE_UPDATED, charge, {"amount_refunded": 0}),
    ]

    rows, _ = event_services.build_many(changes, endpoints=[])

    assert len(rows) == 3
    assert calls == [charge.pk]
