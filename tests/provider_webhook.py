"""Test helpers: provider events as Stripe sends them to POST /webhooks/stripe, signed as
Stripe signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from ledger_app.models import Charge, Refund

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
