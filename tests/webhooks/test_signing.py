"""A delivery as a client receives it: Stripe's event, signed so that the official
package's stripe.Webhook.construct_event verifies it unchanged."""

import json
import time

import pytest
import stripe

from ledger_app.events.delivery import deliver_due, signature_header
from ledger_app.models import Event, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def delivered(endpoint, receiver, worker_dispatch):
    """A refund's refund.created, as the receiver got it."""
    refund = create_refund(
        RefundRequest(charge_id=ChargeFactory(amount=5_000).id, amount=1_200)
    ).item
    deliver_due()
    event = Event.objects.get(type="refund.created")
    received = next(r for r in receiver.received if r.event_id == event.id)
    return refund, received, WebhookEndpoint.objects.get(pk=endpoint.pk).secret


def test_construct_event_verifies_a_real_delivery(delivered):
    refund, received, secret = delivered

    event = stripe.Webhook.construct_event(received.body, received.signature, secret)

    assert event.type == "refund.created"
    assert event.data.object.id == refund.id
    assert event.data.object.object == "refund"
    assert (event.data.object.amount, event.data.object.status) == (1_200, "pending")
    assert event.object == "event" and event.livemode is False
    assert event.pending_webhooks == 1  # this delivery, still pending as it was sent


def test_the_header_has_stripes_shape(delivered):
    _, received, _ = delivered

    t, v1 = received.signature.split(",")

    assert t.startswith("t=") and abs(int(t[2:]) - time.time()) < 60
    assert v1.startswith("v1=") and len(v1) == 3 + 64


@pytest.mark.parametrize(
    "tamper",
    [
        lambda body, header, secret: (body.replace(b"1200", b"9900"), header, secret),
        lambda body, header, secret: (body + b" ", header, secret),
        lambda body, header, secret: (
            body,
            header[:-1] + ("0" if header[-1] != "0" else "1"),
            secret,
        ),
        lambda body, header, secret: (body, header, "whsec_" + "x" * 43),
        lambda body, header, secret: (
            body,
            signature_header(body.decode(), secret, int(time.time()) - 3600),
            secret,
        ),
    ],
    ids=["amount-changed", "body-extended", "signature-changed", "wrong-secret", "too-old"],
)
def test_a_tampered_delivery_is_rejected(delivered, tamper):
    _, received, secret = delivered
    body, header, key = tamper(received.body, received.signature, secret)

    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body, header, key)


def test_the_body_is_the_event_as_the_api_shows_it(delivered):
    refund, received, _ = delivered

    body = json.loads(received.body)

    assert set(body) == {
        "id",
        "object",
        "api_version",
        "created",
        "data",
        "livemode",
        "pending_webhooks",
        "request",
        "type",
    }
    assert body["data"]["object"]["charge"] == refund.charge_id
