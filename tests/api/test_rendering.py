"""A charge and a refund are drawn by render_charge and render_refund, not by DRF's fields:
the serializers' declared fields are the schema. These hold the two together, in every
status: the same fields in the same order, none but those left out when null, and each
answer a new object that sharing callers may change."""

from datetime import UTC, datetime

import pytest

from ledger_app.models import Charge, MovementStatus, Refund
from ledger_app.rendering.charges import NO_BILLING_DETAILS, ChargeSerializer, render_charge
from ledger_app.rendering.refunds import RefundSerializer, render_refund
from ledger_app.rendering.snapshots import object_snapshot

MOMENT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
REFUND_STATES = [
    (status, detail)
    for status in MovementStatus.values
    for detail in ("", "insufficient_funds", "the bank said no")
]
CHARGE_STATES = [
    (status, detail, dispute)
    for status in (MovementStatus.PENDING, MovementStatus.SUCCEEDED, MovementStatus.FAILED)
    for detail in ("", "card_declined", "Your card was declined.")
    for dispute in (None, "dp_1")
]


def refund_in(status: str, detail: str) -> Refund:
    return Refund(
        id="re_1",
        charge_id="ch_1",
        amount=300,
        currency="usd",
        status=status,
        status_detail=detail,
        reason="requested_by_customer" if detail else "",
        metadata={"order": "42"} if detail else {},
        payment_intent="pi_1" if detail else "",
        created_at=MOMENT,
    )


def charge_in(status: str, detail: str, dispute: str | None) -> Charge:
    return Charge(
        id="ch_1",
        amount=1_000,
        amount_refunded=1_000 if dispute else 300,
        currency="eur",
        status=status,
        status_detail=detail,
        customer="cus_1" if detail else "",
        description="Order 42" if detail else "",
        metadata={"order": "42"},
        payment_intent="pi_1" if dispute else "",
        dispute_id=dispute or "",
        created_at=MOMENT,
    )


def declared(serializer_class) -> list[str]:
    return list(serializer_class().fields)


@pytest.mark.parametrize(("status", "detail"), REFUND_STATES)
def test_a_refund_shows_its_declared_fields_in_order(status, detail):
    shown = render_refund(refund_in(status, detail))

    fields = declared(RefundSerializer)
    left_out = [name for name in fields if name not in shown]
    assert list(shown) == [name for name in fields if name in shown]
    assert set(left_out) <= set(RefundSerializer.LEFT_OUT_WHEN_NULL)
    assert shown["ledger_status"] == status and isinstance(shown["created"], int)
    assert ("pending_reason" in shown) == (status in ("pending", "unknown"))
    assert ("failure_reason" in shown) == (status in ("failed", "canceled"))
    if status == "failed":  # Stripe's own words pass; a provider's others are `unknown`
        expected = "insufficient_funds" if detail == "insufficient_funds" else "unknown"
        assert shown["failure_reason"] == expected
    if status == "canceled":
        assert shown["failure_reason"] == "merchant_request"


@pytest.mark.parametrize(("status", "detail", "dispute"), CHARGE_STATES)
@pytest.mark.parametrize("embedded", [False, True])
def test_a_charge_shows_its_declared_fields_in_order(status, detail, dispute, embedded):
    refunds = {"object": "list", "data": [], "has_more": False, "url": "/v1/charges/ch_1/refunds"}
    shown = render_charge(charge_in(status, detail, dispute), refunds=refunds if embedded else None)

    fields = declared(ChargeSerializer)
    assert list(shown) == [name for name in fields if embedded or name != "refunds"]
    assert shown["disputed"] is (dispute is not None)
    assert shown["refunded"] is (dispute is not None)  # those charges are refunded in full
    assert shown["paid"] is shown["captured"] is (status == "succeeded")
    code = detail == "card_declined" and status == "failed"
    assert shown["failure_code"] == ("card_declined" if code else None)
    assert shown["failure_message"] == ((detail or None) if status == "failed" else None)


def test_the_serializers_render_the_same_as_the_functions():
    refund = refund_in(MovementStatus.FAILED, "declined")
    charge = charge_in(MovementStatus.SUCCEEDED, "", None)

    assert RefundSerializer(refund).data == render_refund(refund)
    assert ChargeSerializer(charge, context={"embed_refunds": False}).data == render_charge(charge)
    assert object_snapshot(charge, newest_refunds=[], embed_refunds=True)["refunds"]["data"] == []


def test_every_answer_is_a_new_object():
    charge = charge_in(MovementStatus.SUCCEEDED, "", None)
    first = render_charge(charge)
    first["billing_details"]["address"]["city"] = "changed"
    first["metadata"]["order"] = "changed"
    first["fraud_details"]["x"] = "changed"

    again = render_charge(charge)
    assert again["billing_details"]["address"]["city"] is None
    assert NO_BILLING_DETAILS["address"]["city"] is None
    assert again["metadata"] == {"order": "42"} and again["fraud_details"] == {}
    assert charge.metadata == {"order": "42"}


def plain_json(value) -> bool:
    """Only JSON's own types, not subclasses (a status enum member is a str subclass)."""
    if type(value) is dict:
        return all(type(k) is str and plain_json(v) for k, v in value.items())
    if type(value) is list:
        return all(plain_json(v) for v in value)
    return value is None or type(value) in (str, int, bool)


@pytest.mark.parametrize(("status", "detail"), REFUND_STATES)
def test_an_answer_holds_plain_json_values(status, detail):
    # Events store the answer as it is (snapshots.object_snapshot makes no copy).
    refund = refund_in(MovementStatus(status), detail)
    charge = charge_in(MovementStatus.SUCCEEDED, detail, None)
    charge.status = MovementStatus.SUCCEEDED

    assert plain_json(render_refund(refund))
    assert plain_json(object_snapshot(charge, newest_refunds=[refund], embed_refunds=True))
