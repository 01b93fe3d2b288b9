"""Test helpers: provider events as Stripe sends them to POST /webhooks/stripe, signed as
Stripe signs them; and the objects of a charge and a refund the provider made itself."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from ledger_app.models import Charge, Event, ProviderEvent, Refund

SECRET = "whsec_test_provider_events_boundary"
URL = "/webhooks/stripe"


def signed(body: bytes, *, secret: str = SECRET, at: int | None = None) -> str:
    """Stripe's Stripe-Signature header for this body, dated `at` (now by default)."""
    at = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def post_body(client, body: bytes, **sign):
    return client.post(
        URL, body, content_type="application/json", HTTP_STRIPE_SIGNATURE=signed(body, **sign)
    )


def post_event(client, event: dict, **sign):
    return post_body(client, json.dumps(event).encode(), **sign)


def event_of(event_id: str, event_type: str, obj: dict) -> dict:
    return {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created": int(time.time()),
        "data": {"object": obj},
    }


def refund_object(refund: Refund, status: str, **changed) -> dict:
    """The refund as the provider describes it: its id, charge, amount, currency and our
    metadata; `changed` replaces any of them."""
    obj = {
        "id": refund.provider_refund_id or "re_providerAnswerNeverArrived",
        "object": "refund",
        "charge": refund.charge.provider_reference,
        "amount": refund.amount,
        "currency": refund.currency,
        "status": status,
        "failure_reason": "expired_or_canceled_card" if status == "failed" else None,
        "metadata": {"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
    }
    return {**obj, **changed}


def charge_object(charge: Charge, status: str, **changed) -> dict:
    obj = {
        "id": charge.provider_charge_id or "ch_providerAnswerNeverArrived",
        "object": "charge",
        "amount": charge.amount,
        "currency": charge.currency,
        "status": status,
        "failure_code": "card_declined" if status == "failed" else None,
        "metadata": {"ledger_charge_id": charge.id},
    }
    return {**obj, **changed}


def refund_event(refund: Refund, status: str, *, event_id: str) -> dict:
    """The provider's news of a refund: `refund.updated`, or `refund.failed` when it failed."""
    kind = "refund.failed" if status == "failed" else "refund.updated"
    return event_of(event_id, kind, refund_object(refund, status))


# Objects the provider made itself (its checkout, its dashboard), as Stripe describes them.
CREATED = 1_796_000_000  # 2026-11-30, as Stripe's `created`


def provider_charge(charge_id="ch_3MadeAtTheProvider", **changed) -> dict:
    """A charge as Stripe describes one its checkout took."""
    obj = {
        "id": charge_id,
        "object": "charge",
        "amount": 10_000,
        "amount_captured": 10_000,
        "amount_refunded": 0,
        "captured": True,
        "currency": "usd",
        "customer": "cus_Nf4Customer",
        "payment_intent": "pi_3MadeAtTheProvider",
        "description": "Order 1041",
        "metadata": {"order": "1041"},
        "status": "succeeded",
        "created": CREATED,
    }
    return {**obj, **changed}


def provider_refund(refund_id="re_3MadeInTheDashboard", **changed) -> dict:
    """A refund someone made in the provider's own dashboard: no metadata of ours."""
    obj = {
        "id": refund_id,
        "object": "refund",
        "charge": "ch_3MadeAtTheProvider",
        "amount": 6_000,
        "currency": "usd",
        "status": "succeeded",
        "reason": "requested_by_customer",
        "metadata": {},
        "created": CREATED + 60,
    }
    return {**obj, **changed}


def tell(client, event_type: str, obj: dict, *, event_id: str) -> str:
    answer = post_event(client, event_of(event_id, event_type, obj))
    assert answer.status_code == 200, answer.content
    return ProviderEvent.objects.get(pk=event_id).outcome


def told_types(obj_id: str) -> list[str]:
    return list(
        Event.objects.filter(data_object__id=obj_id).order_by("id").values_list("type", flat=True)
    )


def payment_intent() -> dict:
    return {
        "id": "pi_3MadeAtTheProvider",
        "object": "payment_intent",
        "amount": 10_000,
        "amount_received": 10_000,
        "currency": "usd",
        "customer": "cus_Nf4Customer",
        "latest_charge": "ch_3MadeAtTheProvider",
        "metadata": {},
        "status": "succeeded",
        "created": CREATED,
    }


ADOPTED = "refund re_3MadeInTheDashboard made at the provider adopted as {} (succeeded)"


def arrive(client) -> Charge:
    """provider_charge() told by its charge.succeeded: the charge, arrived."""
    tell(client, "charge.succeeded", provider_charge(), event_id="evt_arrive")
    return Charge.objects.get(pk=provider_charge()["id"])
