"""What the simulated provider does later, and the news it sends about it.

A refund accepted as `pending` (the charge's simulate_refund=pending_then_succeed)
succeeds; one that succeeded with simulate_refund=succeed_then_fail fails, as a refund to
a closed or expired card does. A charge can be disputed, and the dispute closed (its funds
withdrawn and reinstated in the provider's books, simulated_provider/books.py). Each
change is told as Stripe tells it: an event with the object in `data.object`, sent (`send`)
as a signed HTTP POST to the back office's POST /webhooks/stripe, the door a real
provider's webhooks come through.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from simulated_provider import books
from simulated_provider.models import (
    ProviderBalanceTransaction,
    ProviderCharge,
    ProviderDispute,
    ProviderRefund,
    ProviderRequest,
)
from simulated_provider.objects import charge_object, dispute_object, refund_object

Status = ProviderRefund.Status
LATER = {
    # behaviour: (status it waits in, status it ends in, event type, failure reason)
    "pending_then_succeed": (Status.PENDING, Status.SUCCEEDED, "refund.updated", ""),
    "succeed_then_fail": (
        Status.SUCCEEDED,
        Status.FAILED,
        "refund.failed",
        "expired_or_canceled_card",
    ),
}


def advance() -> list[dict]:
    """Finish every refund left for later; the events that tell of it, oldest first."""
    news = []
    for record in ProviderRefund.objects.filter(status__in=[Status.PENDING, Status.SUCCEEDED]):
        later = LATER.get(_behaviour(record))
        if later is None or record.status != later[0]:
            continue
        with transaction.atomic():
            record.status, record.decline_reason = later[1], later[3]
            record.save(update_fields=["status", "decline_reason"])
            if record.status == Status.FAILED:
                books.book_refund_failure(record)
        news.append(event_about(record, later[2]))
    return news


def event_about(record: ProviderRefund | ProviderCharge, event_type: str) -> dict:
    """A Stripe-shaped event for the refund or charge as it is now."""
    if isinstance(record, ProviderRefund):
        return _event(event_type, refund_object(record))
    return _event(event_type, charge_object(record))


def _event(event_type: str, obj: dict) -> dict:
    return {
        "id": "evt_sim_" + secrets.token_hex(12),
        "object": "event",
        "type": event_type,
        "created": int(timezone.now().timestamp()),
        "data": {"object": obj},
    }


# A dispute's statuses that hold its funds: past the inquiry stage (warning_*), and not
# closed because the charge was refunded during it.
HOLD_FUNDS = frozenset({"needs_response", "under_review", "won", "lost"})
OPEN = frozenset(
    {"warning_needs_response", "warning_under_review", "needs_response", "under_review"}
)


def dispute_news(*, charge_reference: str, amount: int, currency: str, status: str) -> list[dict]:
    """Open, move or close the dispute of the charge the provider knows as
    `charge_reference` (one per charge), and the events that tell of it:
    charge.dispute.created (its first word), .updated while it is open, .closed once it
    ended; then .funds_withdrawn when it first holds funds (the amount and the dispute fee
    leave the balance), .funds_reinstated when it is won."""
    with transaction.atomic():
        dispute = (
            ProviderDispute.objects.select_for_update()
            .filter(charge_reference=charge_reference)
            .first()
        )
        first = dispute is None
        if dispute is None:
            dispute = ProviderDispute.objects.create(
                provider_id="dp_sim_" + secrets.token_hex(12),
                charge_reference=charge_reference,
                amount=amount,
                currency=currency,
                status=status,
            )
        else:
            dispute.status = status
            dispute.save(update_fields=["status"])
        moved = set(
            ProviderBalanceTransaction.objects.filter(
                source=dispute.provider_id, type="adjustment"
            ).values_list("reporting_category", flat=True)
        )
        money = []
        if status in HOLD_FUNDS and "dispute" not in moved:
            books.book_dispute(dispute, withdraw=True)
            money.append("charge.dispute.funds_withdrawn")
        if status == "won" and "dispute_reversal" not in moved:
            books.book_dispute(dispute, withdraw=False)
            money.append("charge.dispute.funds_reinstated")
        told = dispute_object(dispute)
    said = (
        "charge.dispute.created"
        if first
        else "charge.dispute.updated"
        if status in OPEN
        else "charge.dispute.closed"
    )
    return [_event(event_type, told) for event_type in [said, *money]]


def _signed(body: str, secret: str) -> str:
    """The Stripe-Signature header Stripe sends: the time, and v1, the hex HMAC-SHA256
    of "<time>.<body>" keyed with the endpoint's secret."""
    now = int(time.time())
    mac = hmac.new(secret.encode(), b"%d.%s" % (now, body.encode()), "sha256")
    return f"t={now},v1={mac.hexdigest()}"


def send(events: list[dict]) -> list[str]:
    """POST each event, signed with STRIPE_WEBHOOK_SECRET, to
    SIMULATED_PROVIDER_WEBHOOK_URL, as Stripe delivers its webhooks; what the back office
    answered for each (its `outcome`, or the HTTP error); `lost` for each when
    SIMULATED_PROVIDER_LOSE_WEBHOOKS is on (nothing is sent)."""
    if settings.SIMULATED_PROVIDER_LOSE_WEBHOOKS:
        return ["lost (SIMULATED_PROVIDER_LOSE_WEBHOOKS)"] * len(events)
    if not settings.STRIPE_WEBHOOK_SECRET:
        raise RuntimeError("STRIPE_WEBHOOK_SECRET is not set: the back office would refuse")
    url = settings.SIMULATED_PROVIDER_WEBHOOK_URL
    if not url.startswith(("http://", "https://")):
        raise RuntimeError(f"SIMULATED_PROVIDER_WEBHOOK_URL must be http(s): {url[:80]!r}")
    answers = []
    for event in events:
        body = json.dumps(event)
        header = _signed(body, settings.STRIPE_WEBHOOK_SECRET)
        request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
            url,
            data=body.encode(),
            headers={"Content-Type": "application/json", "Stripe-Signature": header},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                answers.append(json.loads(answer.read()).get("outcome", ""))
        except urllib.error.HTTPError as refused:
            answers.append(f"HTTP {refused.code}: {refused.read()[:200].decode(errors='replace')}")
    return answers


def _behaviour(record: ProviderRefund) -> str:
    """How the refund was asked to behave, from the provider's own log of the requests
    it received (the first with the refund's key); `succeed` once the log has expired."""
    asked = (
        ProviderRequest.objects.filter(operation="refund", idempotency_key=record.idempotency_key)
        .order_by("created_at", "id")
        .values_list("behaviour", flat=True)
        .first()
    )
    return asked or "succeed"
