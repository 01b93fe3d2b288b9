"""POST /webhooks/stripe: the payment provider's news, signed with STRIPE_WEBHOOK_SECRET.

The signature is checked here and nowhere else (`verified_event`): a bad, missing or
stale one, or one dated more than five minutes ahead, is a 400 and nothing is written.
The event is then applied at most once (`services.provider_events`). Any 2xx tells the
provider to stop resending; a database that is down answers 503 so that it sends again.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import stripe
from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ledger_app.db import drop_broken_connection
from ledger_app.mirror.events_in import apply_provider_event

log = logging.getLogger("ledger_app.provider_events")

# How far a signature's timestamp may be from now, either way. The `stripe` package
# checks only the past; a timestamp ahead would let a captured request replay for longer.
TOLERANCE_SECONDS = 300


class Refused(Exception):
    def __init__(self, code: str, message: str, why: str) -> None:
        super().__init__(why)
        self.code, self.message = code, message


def _refused(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(
        {"error": {"type": "invalid_request_error", "code": code, "message": message}},
        status=status,
    )


def verified_event(body: bytes, header: str, secret: str) -> Any:
    """The body, parsed, once its Stripe-Signature is verified: signed with `secret` by the
    official `stripe` package's check, and dated within TOLERANCE_SECONDS of now, past or
    future."""
    invalid = "The Stripe-Signature header is not valid."
    try:
        if not secret:
            raise stripe.SignatureVerificationError("no webhook secret is configured", header)
        stripe.WebhookSignature.verify_header(body, header, secret, TOLERANCE_SECONDS)
    except (ValueError, stripe.SignatureVerificationError) as exc:
        raise Refused("signature_invalid", invalid, type(exc).__name__) from exc
    if _signed_at(header) > time.time() + TOLERANCE_SECONDS:
        raise Refused(
            "signature_invalid",
            "The Stripe-Signature timestamp is more than five minutes ahead of this server.",
            "timestamp in the future",
        )
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise Refused("body_invalid", "The body is not JSON.", type(exc).__name__) from exc


def _signed_at(header: str) -> int:
    """The timestamp the verified signature covers: the header's first `t=`, read as the
    `stripe` package reads it."""
    for item in header.split(","):
        key, _, value = item.partition("=")
        if key == "t":
            return int(value.split("=")[0])
    raise ValueError("no timestamp")  # verify_header has already refused such a header


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    header = request.headers.get("Stripe-Signature", "")
    try:
        event = verified_event(request.body, header, settings.STRIPE_WEBHOOK_SECRET)
    except Refused as refused:
        log.warning("provider webhook refused: %s", refused)
        return _refused(400, refused.code, refused.message)
    try:
        outcome = apply_provider_event(event)
    except DatabaseError:
        log.exception("provider webhook not applied: database unavailable")
        drop_broken_connection()
        return _refused(503, "database_unavailable", "Try again later.")
    return JsonResponse({"received": True, "outcome": outcome})
