"""The reads every refund makes are precompiled (ledger_app/compiled.py):
they must give what the ORM gives, field for field, on either database, and the lock only
inside a transaction."""

import threading
from datetime import datetime, timedelta

import pytest
from django.db import connections, transaction
from django.db.models import F
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from ledger_app.access.api_keys import create_api_key, revoke_api_key
from ledger_app.access.selectors import active_api_key
from ledger_app.approvals.selectors import api_key_limits
from ledger_app.charges.selectors import charge_for_update, charges_for_update
from ledger_app.charges.services import create_charge
from ledger_app.compiled import Update, precompiled
from ledger_app.events.endpoints import new_secret
from ledger_app.events.selectors import _live_endpoints, live_endpoints
from ledger_app.idempotency.selectors import idempotency_record, made_with
from ledger_app.models import (
    ApiKey,
    Charge,
    IdempotencyRecord,
    Refund,
    RefundLimit,
    WebhookEndpoint,
)
from ledger_app.refunds.selectors import earlier_refund_like, locked_refund, refund_with_charge
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


def fields_of(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_the_locked_charge_is_the_orms_field_for_field():
    charge = ChargeFactory(
        metadata={"order": "42", "note": "ünïcode"}, description="Order 42", payment_intent="pi_1"
    )
    Charge.objects.filter(pk=charge.pk).update(dispute_id="dp_1", dispute_status="won")
    ChargeFactory()  # another, not read

    with transaction.atomic():
        locked = charge_for_update(charge.pk)
        expected = charges_for_update().get(pk=charge.pk)

    assert isinstance(locked, Charge) and locked._state.adding is False
    assert fields_of(locked) == fields_of(expected)
    assert isinstance(locked.metadata, dict) and locked.created_at.tzinfo is not None


def test_no_such_charge_is_none():
    with transaction.atomic():
        assert charge_for_update("ch_missing") is None


@pytest.mark.django_db(transaction=True)
def test_the_lock_is_refused_outside_a_transaction():
    charge = ChargeFactory()

    with pytest.raises(TransactionManagementError):
        charge_for_update(charge.pk)


def endpoint(path: str) -> WebhookEndpoint:
    made = WebhookEndpoint(
        url=f"https://hooks.example.com/{path}",
        enabled_events=["charge.refunded"],
        metadata={"team": "payments"},
        secret=new_secret(),
    )
    made.save(force_insert=True)
    return made


def test_live_endpoints_are_the_orms_in_order():
    second, first, gone = endpoint("b"), endpoint("a"), endpoint("c")
    WebhookEndpoint.objects.filter(pk=gone.pk).update(deleted_at=timezone.now())
    WebhookEndpoint.objects.filter(pk=second.pk).update(
        created_at=first.created_at + timedelta(seconds=1)
    )
    WebhookEndpoint.objects.filter(pk=endpoint("d").pk).update(status="disabled")

    shown = live_endpoints()

    expected = list(
        WebhookEndpoint.objects.filter(status="enabled", deleted_at__isnull=True).order_by(
            "created_at", "id"
        )
    )
    assert [e.pk for e in shown] == [first.pk, second.pk] == [e.pk for e in expected]
    assert [fields_of(e) for e in shown] == [fields_of(e) for e in expected]


def test_the_api_key_and_its_limits_are_the_orms():
    key, _ = create_api_key(name="compiled")
    revoked, _ = create_api_key(name="revoked")
    revoke_api_key(prefix=revoked.prefix)
    other, _ = create_api_key(name="other")
    RefundLimit.objects.create(api_key=key, currency="usd", per_refund=500, per_day=5_000)
    RefundLimit.objects.create(api_key=key, currency="eur", per_refund=700, per_day=7_000)
    RefundLimit.objects.create(api_key=other, currency="usd", per_refund=1, per_day=1)

    found = active_api_key(key.prefix)

    assert found is not None and fields_of(found) == fields_of(ApiKey.objects.get(pk=key.pk))
    assert active_api_key(revoked.prefix) is None and active_api_key("sk_nothing0") is None
    shown = sorted((fields_of(r) for r in api_key_limits(key.prefix)), key=str)
    expected = sorted((fields_of(r) for r in RefundLimit.objects.filter(api_key=key)), key=str)
    assert shown == expected and len(shown) == 2
    assert api_key_limits("sk_nothing0") == []


def test_a_keys_record_and_what_it_made_are_the_orms():
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(
        RefundRequest(
            charge_id=charge.pk, amount=700, idempotency_key="k-refund", metadata={"order": "7"}
        )
    ).item
    made = create_charge(amount=900, currency="usd", idempotency_key="k-charge").item
    create_refund(RefundRequest(charge_id=charge.pk, amount=1, idempotency_key="k-other"))

    for key, expected in [("k-refund", Refund.objects.get(pk=refund.pk)), ("k-charge", made)]:
        record = idempotency_record(key)
        assert record is not None
        assert fields_of(record) == fields_of(IdempotencyRecord.objects.get(key=key))
        result = made_with(record)
        assert type(result) is type(expected) and result._state.adding is False
        assert fields_of(result) == fields_of(type(expected)._default_manager.get(pk=expected.pk))
    refund_record = idempotency_record("k-refund")
    assert refund_record is not None
    assert made_with(refund_record).metadata == {"order": "7"}
    assert idempotency_record("k-nothing") is None


def test_a_keys_record_is_its_owners_own():
    """The compiled read of a key, and the hand-written claim, both mean (owner, key)."""
    charge = ChargeFactory(amount=5_000)
    client = "api_key:sk_test_owner1"
    by_client = create_refund(
        RefundRequest(charge_id=charge.pk, amount=7, idempotency_key="k", actor=client)
    )
    by_staff = create_refund(
        RefundRequest(charge_id=charge.pk, amount=9, idempotency_key="k", actor="cli:ana")
    )

    for owner, made in [(client, by_client.item), ("backoffice", by_staff.item)]:
        record = idempotency_record("k", owner)
        expected = IdempotencyRecord.objects.get(key="k", owner=owner)
        assert record is not None and fields_of(record) == fields_of(expected)
        assert record.refund_id == made.id
    staffs = idempotency_record("k")
    assert staffs is not None and staffs.refund_id == by_staff.item.id  # the back office's
    assert idempotency_record("k", "api_key:sk_test_other") is None


@pytest.mark.django_db(transaction=True)
def test_each_threads_connection_keeps_its_own_compiled_queries():
    # The ORM's converters belong to a connection; `django.db.connection` is a proxy that
    # every thread shares, so the compiled queries are kept on each thread's own one.
    live_endpoints()
    theirs = []

    def other_thread() -> None:
        try:
            live_endpoints()
            theirs.append(connections["default"])
        finally:
            connections.close_all()

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join(30)

    mine = connections["default"]
    assert len(theirs) == 1 and theirs[0] is not mine
    # compiled.py keeps each connection's own in its __dict__
    assert _live_endpoints in vars(mine)["_precompiled"]
    assert _live_endpoints in vars(theirs[0])["_precompiled"]


def test_the_earlier_refund_a_repeat_would_repeat_is_the_orms():
    charge = ChargeFactory(amount=10_000)
    now = timezone.now()
    made = {}
    for name, amount, batch, age in [
        ("old", 500, "", timedelta(days=9)),
        ("same", 500, "", timedelta(hours=2)),
        ("newer", 500, "b-7", timedelta(hours=1)),
        ("other_amount", 700, "", timedelta(minutes=5)),
    ]:
        refund = create_refund(
            RefundRequest(charge_id=charge.pk, amount=amount, batch_id=batch)
        ).item
        Refund.objects.filter(pk=refund.pk).update(created_at=now - age)
        made[name] = refund.pk
    declined = create_refund(RefundRequest(charge_id=charge.pk, amount=500)).item
    Refund.objects.filter(pk=declined.pk).update(status="failed")

    def orm(amount, since, batch=""):
        rows = Refund.objects.filter(
            charge_id=charge.pk, amount=amount, status__in=Refund.LIVE_STATUSES
        ).filter(created_at__gte=since)
        if batch:
            rows = rows.exclude(batch_id=batch)
        return rows.order_by("-created_at", "-id").first()

    week = now - timedelta(days=7)
    for amount, since, batch, expected in [
        (500, week, "", "newer"),
        (500, week, "b-7", "same"),
        (500, now - timedelta(minutes=90), "b-7", None),
        (500, now - timedelta(days=30), "", "newer"),
        (700, week, "b-7", "other_amount"),
        (900, week, "", None),
    ]:
        found = earlier_refund_like(charge.pk, amount, since=since, other_than_batch=batch)
        assert (found and found.pk) == (expected and made[expected])
        assert (found and fields_of(found)) == (
            orm(amount, since, batch) and fields_of(orm(amount, since, batch))
        )


def test_a_sends_refund_and_a_settles_locked_refund_are_the_orms():
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=300, metadata={"a": "1"})).item
    other = ChargeFactory()

    with transaction.atomic():
        locked = locked_refund(refund_id=refund.pk, charge_id=charge.pk)
        with pytest.raises(Refund.DoesNotExist):
            locked_refund(refund_id=refund.pk, charge_id=other.pk)
    sent = refund_with_charge(refund.pk)

    expected = Refund.objects.select_related("charge").get(pk=refund.pk)
    assert fields_of(locked) == fields_of(sent) == fields_of(expected)
    assert fields_of(sent.charge) == fields_of(expected.charge)
    with pytest.raises(Refund.DoesNotExist):
        refund_with_charge("re_missing")


@pytest.mark.django_db(transaction=True)
def test_a_refund_is_locked_only_inside_a_transaction():
    refund = create_refund(RefundRequest(charge_id=ChargeFactory().pk, amount=1)).item

    with pytest.raises(TransactionManagementError):
        locked_refund(refund_id=refund.pk, charge_id=refund.charge_id)


@precompiled
def _add_to_note(pk: str, before: datetime, note: str) -> Update[Refund]:
    return Update(
        Refund.objects.filter(pk=pk, created_at__lt=before),
        {"note": note, "dispatch_attempts": F("dispatch_attempts") + 1},
    )


def test_a_compiled_update_changes_what_the_orms_would_and_says_how_many():
    charge = ChargeFactory(amount=5_000)
    first, second = (
        create_refund(RefundRequest(charge_id=charge.pk, amount=1)).item for _ in range(2)
    )
    later = timezone.now() + timedelta(seconds=1)

    changed = [
        _add_to_note(first.pk, later, "noted"),
        _add_to_note(first.pk, later, "again"),
        _add_to_note(second.pk, first.created_at, "too early"),
    ]

    assert changed == [1, 1, 0]
    now_first, now_second = (Refund.objects.get(pk=r.pk) for r in (first, second))
    assert (now_first.note, now_first.dispatch_attempts) == ("again", first.dispatch_attempts + 2)
    assert (now_second.note, now_second.dispatch_attempts) == ("", second.dispatch_attempts)
