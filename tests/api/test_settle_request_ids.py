"""A refund the API sends to the provider during its request settles with events that
name that request: `refund.updated` (and `refund.failed`) carry its Request-Id and the
Idempotency-Key that created the refund, whether the send ran in the request's thread or
in the send pool. A settle by the worker names no request. Through the official `stripe`
package against the running server."""

import pytest
import stripe

from ledger_app.models import Refund
from ledger_app.provider.dispatch import process_pending_refunds
from tests.provider_webhook import SECRET, refund_event
from tests.provider_webhook import post_event as post

pytestmark = pytest.mark.django_db(transaction=True)


def requests_of(stripe_client, refund_id: str) -> dict[str, stripe.Event.Request]:
    """The request each event of the refund names, by the event's type (ours name one
    always: its id and key are null when no request made it)."""
    events = stripe_client.v1.events.list(params={"limit": 100}).data
    named = {event.type: event.request for event in events if event.data.object.id == refund_id}
    assert all(named.values()), named
    return {kind: request for kind, request in named.items() if request}


def keyed_refund(stripe_client, charge_id: str, key: str):
    refund = stripe_client.v1.refunds.create(
        params={"charge": charge_id, "amount": 1_000}, options={"idempotency_key": key}
    )
    return refund, refund.last_response.headers["Request-Id"]


def new_charge(stripe_client, **metadata):
    return stripe_client.v1.charges.create(
        params={"amount": 10_000, "currency": "usd", "metadata": metadata}
    )


class TestSettledDuringTheRequest:
    def test_inline_settle_names_the_request_and_its_key(self, stripe_client, inline_dispatch):
        refund, request_id = keyed_refund(stripe_client, new_charge(stripe_client).id, "ord-1")
        assert refund.status == "succeeded"

        updated = requests_of(stripe_client, refund.id)["refund.updated"]

        assert updated.id == request_id
        assert updated.idempotency_key == "ord-1"

    def test_settle_in_the_send_pool_names_them_too(self, stripe_client, inline_dispatch, settings):
        settings.REFUND_INLINE_WAIT_SECONDS = 10  # another thread sends; the request waits
        refund, request_id = keyed_refund(stripe_client, new_charge(stripe_client).id, "ord-2")
        assert refund.status == "succeeded"

        updated = requests_of(stripe_client, refund.id)["refund.updated"]

        assert (updated.id, updated.idempotency_key) == (request_id, "ord-2")

    def test_a_declined_refund_names_them_on_updated_and_failed(
        self, stripe_client, inline_dispatch, settings
    ):
        settings.REFUND_INLINE_WAIT_SECONDS = 10
        charge = new_charge(stripe_client, simulate_refund="decline")
        refund, request_id = keyed_refund(stripe_client, charge.id, "ord-3")
        assert refund.status == "failed"

        events = requests_of(stripe_client, refund.id)

        for kind in ("refund.updated", "refund.failed"):
            assert events[kind].id == request_id, kind
            assert events[kind].idempotency_key == "ord-3", kind

    def test_the_key_the_package_made_is_named_like_created(self, stripe_client, inline_dispatch):
        """Without an explicit key the stripe package sends one of its own."""
        charge = new_charge(stripe_client)
        refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 500})

        events = requests_of(stripe_client, refund.id)
        created, updated = events["refund.created"], events["refund.updated"]

        assert updated.id == refund.last_response.headers["Request-Id"]
        assert created.idempotency_key
        assert updated.idempotency_key == created.idempotency_key


class TestSettledLater:
    def test_worker_settle_names_no_request_and_no_key(self, stripe_client, worker_dispatch):
        refund, request_id = keyed_refund(stripe_client, new_charge(stripe_client).id, "ord-4")
        assert refund.status == "pending"

        process_pending_refunds()

        events = requests_of(stripe_client, refund.id)
        assert events["refund.created"].id == request_id
        assert events["refund.updated"].id is None
        assert events["refund.updated"].idempotency_key is None

    def test_another_request_settling_it_names_no_key(self, stripe_client, worker_dispatch):
        """The key belongs to the request that created the refund, not to any later one."""
        first, _ = keyed_refund(stripe_client, new_charge(stripe_client).id, "ord-5")
        second, _ = keyed_refund(stripe_client, new_charge(stripe_client).id, "ord-6")

        process_pending_refunds()

        for refund in (first, second):
            updated = requests_of(stripe_client, refund.id)["refund.updated"]
            assert updated.idempotency_key is None

    def test_the_providers_webhook_settling_it_names_no_key(
        self, stripe_client, inline_dispatch, client, settings
    ):
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        charge = new_charge(stripe_client, simulate_refund="pending_then_succeed")
        refund, request_id = keyed_refund(stripe_client, charge.id, "ord-7")
        stored = Refund.objects.get(pk=refund.id)
        assert stored.status == "unknown"  # the provider said pending: its word comes later

        answer = post(client, refund_event(stored, "succeeded", event_id="evt_provider_1"))

        assert answer.status_code == 200
        later = [
            event
            for event in stripe_client.v1.events.list(params={"type": "refund.updated"}).data
            if event.data.object.id == refund.id and event.data.object.status == "succeeded"
        ]
        assert len(later) == 1
        named = later[0].request
        assert named is not None
        assert named.idempotency_key is None
        assert named.id not in (None, request_id)  # the webhook's own request
