"""The drift finder sees every kind of disagreement it claims to check."""

import pytest

from ledger_app.charges.services import create_charge
from ledger_app.ledger.drift import find_ledger_drift
from ledger_app.models import Charge, IdempotencyRecord, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.allows_drift, pytest.mark.sqlite_pass]


def problems():
    return sorted((d.object_id, d.problem) for d in find_ledger_drift())


def test_clean_books_have_no_drift(succeeded_charge):
    create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k"))
    create_refund(RefundRequest(charge_id=succeeded_charge.id))

    assert problems() == []


def test_several_keyed_charges_are_not_one_refund_bound_by_several_keys(db):
    create_charge(amount=1_000, currency="usd", idempotency_key="charge-1")
    create_charge(amount=2_000, currency="usd", idempotency_key="charge-2")

    assert problems() == []


def test_amount_refunded_that_disagrees_with_refunds_is_drift(succeeded_charge):
    create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100))
    Charge.objects.filter(pk=succeeded_charge.pk).update(amount_refunded=150)

    assert problems() == [(succeeded_charge.id, "amount_refunded_drift")]


def test_a_refund_missing_from_the_ledger_is_drift(succeeded_charge):
    refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
    Refund.objects.filter(pk=refund.pk).update(amount=90)  # refunds and ledger now disagree
    Charge.objects.filter(pk=succeeded_charge.pk).update(amount_refunded=90)

    assert problems() == [(succeeded_charge.id, "amount_refunded_drift")]


def test_failed_refunds_do_not_count_as_refunded(succeeded_charge):
    refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
    Refund.objects.filter(pk=refund.pk).update(status=Refund.Status.FAILED)

    assert problems() == [(succeeded_charge.id, "amount_refunded_drift")]


def test_refund_in_another_currency_is_drift(succeeded_charge):
    refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
    Refund.objects.filter(pk=refund.pk).update(currency="eur")

    assert problems() == [(refund.id, "currency_mismatch")]


def test_a_refund_bound_by_two_keys_is_drift(succeeded_charge):
    refund = create_refund(
        RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k1")
    ).item
    record = IdempotencyRecord.objects.get(key="k1")
    IdempotencyRecord.objects.create(
        key="k2",
        operation=record.operation,
        fingerprint=record.fingerprint,
        request_params=record.request_params,
        refund=refund,
    )

    assert problems() == [(refund.id, "refund_bound_by_several_keys")]


def test_a_key_bound_to_a_refund_of_another_charge_or_intent_is_drift(db):
    mine, other = ChargeFactory(), ChargeFactory()
    by_charge = create_refund(
        RefundRequest(charge_id=mine.id, amount=100, idempotency_key="c1")
    ).item
    by_intent = create_refund(
        RefundRequest(payment_intent=mine.payment_intent, amount=100, idempotency_key="p1")
    ).item
    assert problems() == []

    IdempotencyRecord.objects.filter(key="c1").update(
        request_params={
            **IdempotencyRecord.objects.get(key="c1").request_params,
            "charge": other.id,
        }
    )
    params = IdempotencyRecord.objects.get(key="p1").request_params
    IdempotencyRecord.objects.filter(key="p1").update(
        request_params={**params, "payment_intent": other.payment_intent}
    )

    assert problems() == sorted(
        [(by_charge.id, "key_does_not_match_refund"), (by_intent.id, "key_does_not_match_refund")]
    )


def test_drift_is_found_among_many_charges(db):
    charges = [ChargeFactory(amount=500) for _ in range(5)]
    for charge in charges:
        create_refund(RefundRequest(charge_id=charge.id, amount=200))
    Charge.objects.filter(pk=charges[3].pk).update(amount_refunded=0)

    assert problems() == [(charges[3].id, "amount_refunded_drift")]
