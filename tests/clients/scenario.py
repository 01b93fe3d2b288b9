"""The client matrix's scenario for the official `stripe` package for Python, used as a
client system uses it: an API key and the server's address, every other setting the
package's own. scenario.js takes the same steps with stripe-node; test_client_matrix.py
runs both against a served instance, one client version at a time.

    python scenario.py run             # the API steps
    python scenario.py verify-webhook  # one delivery, checked with stripe.Webhook

Every step prints one JSON line (`{"step": ..., "ok": true, ...}`); the first failed
check prints `"ok": false` with what went wrong and exits 1. It reads from the
environment: STRIPE_API_BASE (http://127.0.0.1:PORT), STRIPE_API_KEY (a read-write key
without limits), STRIPE_LIMITED_API_KEY (a key whose refunds over its limit wait for
approval); for verify-webhook, WEBHOOK_BODY_FILE (the delivery's raw body),
WEBHOOK_SIGNATURE (its Stripe-Signature header), WEBHOOK_SECRET and WEBHOOK_REFUND (the
refund whose refund.created it should be).

It imports nothing of the project: only the stripe package found first on sys.path.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stripe


class Failed(Exception):
    pass


def check(condition: object, what: str) -> None:
    if not condition:
        raise Failed(what)


LAST_STEP = ["start"]  # the last step that passed, named when the next one fails


def emit(step: str, **details: Any) -> None:
    LAST_STEP[0] = step
    print(json.dumps({"step": step, "ok": True, **details}, default=str), flush=True)


def answered_in(*objects: Any) -> list[str]:
    """The API versions the server said it answered these in (its Stripe-Version)."""
    return sorted({o.last_response.headers.get("Stripe-Version") for o in objects})


def client(key_variable: str) -> stripe.StripeClient:
    return stripe.StripeClient(
        os.environ[key_variable], base_addresses={"api": os.environ["STRIPE_API_BASE"]}
    )


def run() -> None:
    api, limited = client("STRIPE_API_KEY"), client("STRIPE_LIMITED_API_KEY")
    run_id = uuid.uuid4().hex[:12]
    emit("client", language="python", package_version=stripe.VERSION, sent=stripe.api_version)

    charge = api.v1.charges.create(
        params={"amount": 5_000, "currency": "usd", "metadata": {"order": run_id}},
        options={"idempotency_key": f"{run_id}-charge"},
    )
    check(charge.object == "charge" and charge.status == "succeeded", f"charge {charge}")
    check(charge.amount == 5_000 and charge.amount_refunded == 0, "charge amounts")
    intent = str(charge.payment_intent)
    check(intent.startswith("pi_"), "charge without a PaymentIntent")
    emit("charge", id=charge.id, payment_intent=charge.payment_intent, answered=answered_in(charge))

    key = f"{run_id}-refund-1"
    first = api.v1.refunds.create(
        params={"charge": charge.id, "amount": 1_000}, options={"idempotency_key": key}
    )
    second = api.v1.refunds.create(params={"charge": charge.id, "amount": 500})
    check((first.amount, first.status, first.charge) == (1_000, "succeeded", charge.id), "first")
    check((second.amount, second.status) == (500, "succeeded"), f"second refund {second}")
    emit("partial_refund", id=first.id, second=second.id, answered=answered_in(first, second))

    page = api.v1.refunds.list(params={"charge": charge.id, "limit": 1})
    check([r.id for r in page.data] == [second.id] and page.has_more, f"first page {page}")
    walked = [r.id for r in page.auto_paging_iter()]
    check(walked == [second.id, first.id], f"auto-pagination walked {walked}")
    emit("list_refunds", walked=walked, answered=answered_in(page))

    by_intent = api.v1.refunds.create(params={"payment_intent": intent, "amount": 700})
    check(by_intent.charge == charge.id, f"refund by PaymentIntent {by_intent}")
    check(by_intent.payment_intent == charge.payment_intent, "its payment_intent")
    listed = api.v1.refunds.list(params={"payment_intent": intent})
    check(by_intent.id in [r.id for r in listed.data], "listed by PaymentIntent")
    emit("refund_by_payment_intent", id=by_intent.id, answered=answered_in(by_intent, listed))

    expanded = api.v1.refunds.retrieve(first.id, params={"expand": ["charge"]})
    inside = expanded.charge
    assert isinstance(inside, stripe.Charge), f"charge not expanded: {inside}"
    check(inside.id == charge.id and inside.amount_refunded == 2_200, f"expanded {inside}")
    emit("expand", charge=inside.id, answered=answered_in(expanded))

    waiting = limited.v1.refunds.create(params={"charge": charge.id, "amount": 2_000})
    # ledger_status: the back office's own field (docs/api.md), not in the package's types
    check((waiting.status, waiting["ledger_status"]) == ("pending", "awaiting_approval"), "wait")
    canceled = limited.v1.refunds.cancel(waiting.id)
    check(canceled.status == "canceled", f"canceled {canceled}")
    try:
        limited.v1.refunds.cancel(waiting.id)
        raise Failed("a second cancel was not refused")
    except stripe.InvalidRequestError as error:
        check(error.code == "refund_not_cancelable", f"second cancel: {error.code}")
    emit("cancel", id=waiting.id, answered=answered_in(waiting, canceled))

    replayed = api.v1.refunds.create(
        params={"charge": charge.id, "amount": 1_000}, options={"idempotency_key": key}
    )
    check(replayed.id == first.id, "a replay with the same key made another refund")
    try:
        api.v1.refunds.create(
            params={"charge": charge.id, "amount": 1_500}, options={"idempotency_key": key}
        )
        raise Failed("the same key with another amount was not refused")
    except stripe.IdempotencyError as error:
        check(error.http_status == 400, f"mismatched retry: {error.http_status}")
        # stripe-python sets no `code` on an IdempotencyError; the error object has it
        told = error.error.code if error.error else None
        check(told == "idempotency_key_reused", f"mismatched retry: {told}")
        mismatched = (error.headers or {}).get("Stripe-Version")
    emit("mismatched_retry", code="idempotency_key_reused", answered=[mismatched])

    try:
        api.v1.charges.create(
            params={"amount": 900, "currency": "usd", "metadata": {"simulate_charge": "decline"}}
        )
        raise Failed("the declined charge was not refused")
    except stripe.CardError as error:
        check((error.http_status, error.code) == (402, "card_declined"), f"declined: {error}")
        check(error.error is not None and error.error.decline_code, "no decline_code")
        decline_code = error.error.decline_code if error.error else None
        declined = error.error.charge if error.error else None
        declined_answer = (error.headers or {}).get("Stripe-Version")
    failed = api.v1.charges.retrieve(str(declined))
    check(failed.status == "failed" and failed.paid is False, f"declined charge {failed}")
    emit("declined", decline_code=decline_code, charge=declined, answered=[declined_answer])

    final = api.v1.charges.retrieve(charge.id)
    check((final.amount_refunded, final.refunded) == (2_200, False), f"final {final}")
    emit("balance", amount_refunded=final.amount_refunded, answered=answered_in(final))


def verify_webhook() -> None:
    body = Path(os.environ["WEBHOOK_BODY_FILE"]).read_bytes()
    signature, secret = os.environ["WEBHOOK_SIGNATURE"], os.environ["WEBHOOK_SECRET"]
    emit("client", language="python", package_version=stripe.VERSION, sent=stripe.api_version)

    event = stripe.Webhook.construct_event(body.decode(), signature, secret)
    check(event.type == "refund.created", f"event type {event.type}")
    check(event.data.object.object == "refund", "not a refund")
    check(event.data.object.id == os.environ["WEBHOOK_REFUND"], "another refund")
    for changed, key, what in ((body + b" ", secret, "body"), (body, secret + "x", "secret")):
        try:
            stripe.Webhook.construct_event(changed.decode(), signature, key)
            raise Failed(f"a changed {what} was accepted")
        except stripe.SignatureVerificationError:
            pass
    emit("webhook", event=event.id, type=event.type, refund=event.data.object.id)


def main(mode: str) -> int:
    steps: dict[str, Callable[[], None]] = {"run": run, "verify-webhook": verify_webhook}
    try:
        steps[mode]()
    except Exception as error:  # every failure is one line and exit 1
        failure = {"step": "failed", "ok": False, "after": LAST_STEP[0], "error": repr(error)}
        print(json.dumps(failure), flush=True)
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "run"))
