"""POST /webhooks/stripe: the payment provider's news, signed with STRIPE_WEBHOOK_SECRET.

The signature is checked with the official `stripe` package (a bad, missing or stale one
is a 400 and nothing is written); the event is then applied once
(`services.provider_events`). Any 2xx tells the provider to stop resending; a database
that is down answers 503 so that it sends again later.
"""

from __future__ import annotations

import logging

import stripe
from django.conf import settings
from django.db import DatabaseError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ledger_app.db import drop_broken_connection
from ledger_app.services.provider_events import apply_provider_event

log = logging.getLogger("ledger_app.provider_events")


def _refused(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(
        {"error": {"type": "invalid_request_error", "code": code, "message": message}},
        status=status,
    )


@csrf_exempt
@require_POST
def stripe_webhook(request):
    secret = settings.STRIPE_WEBHOOK_SECRET
    header = request.headers.get("Stripe-Signature", "")
    try:
        if not secret:
            raise stripe.SignatureVerificationError("no webhook secret is configured", header)
        event = stripe.Webhook.construct_event(request.body, header, secret)
    except (ValueError, stripe.SignatureVerificationError) as exc:
        log.warning("provider webhook refused: %s", type(exc).__name__)
        return _refused(400, "signature_invalid", "The Stripe-Signature header is not valid.")
    try:
        outcome = apply_provider_event(event.to_dict())
    except DatabaseError:
        log.exception("provider webhook %s not applied: database unavailable", event.get("id"))
        drop_broken_connection()
        return _refused(503, "database_unavailable", "Try again later.")
    return JsonResponse({"received": True, "outcome": outcome})
