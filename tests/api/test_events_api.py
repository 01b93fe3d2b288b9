"""Events through the official `stripe` package against the running server: listed,
filtered, paged and retrieved, each naming the API request that caused it."""

from datetime import UTC, datetime, timedelta

import pytest
import stripe

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Event
from ledger_app.provider.dispatch import process_pending_refunds
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db(transaction=True)

T = 1_767_225_600  # 2026-01-01 00:00:00 UTC


@pytest.fixture
def charge(stripe_client):
    return stripe_client.v1.charges.create(params={"amount": 10_000, "currency": "usd"})


@pytest.fixture
def global_client(live_server, api_key):
    """The package's module-level style: stripe.api_key and stripe.api_base."""
    stripe.api_key, stripe.api_base, stripe.max_network_retries = api_key, live_server.url, 0
    yield
    stripe.api_key, stripe.api_base = None, "https://api.stripe.com"


def ids(listing) -> list[str]:
    return [event.id for event in listing.data]


def succeeded_charge_events(count: int) -> list[str]:
    """`count` charge.succeeded events, oldest first, at T, T+10, T+20... (and half a
    second into that second, which `created` does not show)."""
    made = []
    for n in range(count):
        charge = ChargeFactory(amount=100 + n)
        event = Event.objects.get(charge=charge, type="charge.succeeded")
        moment = datetime.fromtimestamp(T + 10 * n, tz=UTC) + timedelta(milliseconds=500)
        Event.objects.filter(pk=event.pk).update(created_at=moment)
        made.append(event.pk)
    return made


def caused_by(stripe_client, request_id: str) -> dict[str, stripe.Event]:
    events = stripe_client.v1.events.list(params={"limit": 100}).data
    return {event.type: event for event in events if event.request.id == request_id}


class TestListAndRetrieve:
    def test_newest_first_and_each_retrieved_as_listed(self, stripe_client):
        made = succeeded_charge_events(3)

        listing = stripe_client.v1.events.list()

        assert ids(listing) == list(reversed(made))
        assert listing.url == "/v1/events" and listing.has_more is False
        for listed in listing.data:
            fetched = stripe_client.v1.events.retrieve(listed.id)
            assert fetched.to_dict() == listed.to_dict()
            assert (fetched.object, fetched.type, fetched.livemode) == ("event", listed.type, False)
            assert fetched.data.object.object == "charge"

    def test_pages_walk_every_event_once(self, stripe_client):
        made = succeeded_charge_events(5)

        first = stripe_client.v1.events.list(params={"limit": 2})
        everything = [event.id for event in first.auto_paging_iter()]
        before = stripe_client.v1.events.list(params={"limit": 2, "ending_before": made[1]})

        assert first.has_more is True and len(first.data) == 2
        assert everything == list(reversed(made))
        assert ids(before) == [made[3], made[2]] and before.has_more is True

    def test_type_types_and_a_wildcard(self, stripe_client, charge):
        stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})

        def types_of(**params):
            return [e.type for e in stripe_client.v1.events.list(params=params).data]

        assert types_of(type="charge.succeeded") == ["charge.succeeded"]
        assert set(types_of(types=["refund.created", "charge.refunded"])) == {
            "refund.created",
            "charge.refunded",
        }
        assert set(types_of(type="charge.*")) == {"charge.succeeded", "charge.refunded"}
        assert set(types_of(type="*")) == set(types_of())
        assert types_of(type="charge.dispute.created") == []

    @pytest.mark.parametrize("asked", ["charge.\x00", "\U000fbf9fW'\x00", "ref\x00und.*"])
    def test_a_type_no_event_can_have_lists_nothing_and_never_fails(self, api, charge, asked):
        """Found by the schema fuzzer: a NUL in the type reached PostgreSQL, which cannot
        compare it (a 500). Such a type names no event."""
        for params in ({"type": asked}, {"types[]": ["charge.succeeded", asked]}):
            answer = api.get("/v1/events", params)
            assert (answer.status_code, answer.json()["data"]) == (200, [])

    def test_created_filters_in_unix_seconds(self, stripe_client):
        made = succeeded_charge_events(3)  # at T, T+10, T+20

        def listed(created):
            return ids(stripe_client.v1.events.list(params={"created": created}))

        assert listed({"gte": T + 10}) == [made[2], made[1]]
        assert listed({"gt": T + 10}) == [made[2]]
        assert listed({"lt": T + 10}) == [made[0]]
        assert listed({"lte": T + 10}) == [made[1], made[0]]
        assert listed({"gt": T, "lt": T + 20}) == [made[1]]
        assert listed(T + 10) == [made[1]]
        assert listed(T + 11) == []

    def test_types_and_created_together_and_paged(self, stripe_client):
        made = succeeded_charge_events(4)

        page = stripe_client.v1.events.list(
            params={"types": ["charge.succeeded"], "created": {"gte": T + 10}, "limit": 2}
        )
        rest = stripe_client.v1.events.list(
            params={
                "types": ["charge.succeeded"],
                "created": {"gte": T + 10},
                "starting_after": page.data[-1].id,
            }
        )

        assert ids(page) == [made[3], made[2]] and page.has_more is True
        assert ids(rest) == [made[1]] and rest.has_more is False

    def test_module_level_event_list_and_retrieve(self, global_client):
        made = succeeded_charge_events(2)

        listing = stripe.Event.list(limit=1, type="charge.succeeded")
        fetched = stripe.Event.retrieve(made[0])

        assert ids(listing) == [made[1]] and listing.has_more is True
        assert isinstance(fetched, stripe.Event) and fetched.id == made[0]
        assert fetched.data.object.amount == 100

    def test_read_only_key_reads_events(self, live_server):
        made = succeeded_charge_events(1)
        secret = create_api_key(name="reporting", read_only=True)[1]
        reader = stripe.StripeClient(
            secret, base_addresses={"api": live_server.url}, max_network_retries=0
        )

        assert ids(reader.v1.events.list()) == made
        assert reader.v1.events.retrieve(made[0]).id == made[0]

    def test_unknown_event_is_404(self, stripe_client):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.events.retrieve("evt_nope")

        assert (error.value.http_status, error.value.code) == (404, "resource_missing")


class TestEventsOfApiRequests:
    def test_a_refund_names_its_request_and_idempotency_key(self, stripe_client, charge):
        refund = stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 2_500},
            options={"idempotency_key": "order-9-refund-1"},
        )
        request_id = refund.last_response.headers["Request-Id"]

        events = caused_by(stripe_client, request_id)

        created, refunded = events["refund.created"], events["charge.refunded"]
        assert created.request is not None and refunded.request is not None
        assert created.request.idempotency_key == "order-9-refund-1"
        assert refunded.request.idempotency_key == "order-9-refund-1"
        assert created.data.object.id == refund.id
        assert created.data.object.status == "pending"  # as it was when it was created
        assert refunded.data.object.id == charge.id
        assert refunded.data.object.amount_refunded == 2_500
        previous = refunded.data.previous_attributes
        assert previous is not None and previous.to_dict() == {"amount_refunded": 0}
        assert "refunds" not in refunded.data.object  # the current API version's charge

    def test_settled_after_dispatch_shows_the_status_it_had(
        self, stripe_client, charge, worker_dispatch
    ):
        refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})
        assert refund.status == "pending"

        process_pending_refunds()

        updated = stripe_client.v1.events.list(params={"type": "refund.updated"}).data
        assert len(updated) == 1
        assert updated[0].data.object.id == refund.id
        assert updated[0].data.object.status == "succeeded"
        assert updated[0].data.previous_attributes.to_dict() == {
            "destination_details": {
                "card": {"reference_status": "pending", "type": "pending"},
                "type": "card",
            },
            "status": "pending",
            "ledger_status": "pending",
            "pending_reason": "processing",
        }
        assert updated[0].request.id is None  # the worker, not a request
        assert updated[0].request.idempotency_key is None

    def test_refund_metadata_update_shows_the_metadata_it_had(
        self, stripe_client, global_client, charge
    ):
        refund = stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 100, "metadata": {"ticket": "T-1"}}
        )

        changed = stripe_client.v1.refunds.update(refund.id, params={"metadata": {"agent": "ana"}})
        again = stripe.Refund.modify(refund.id, metadata={"ticket": ""})

        assert changed.metadata.to_dict() == {"ticket": "T-1", "agent": "ana"}
        assert again.metadata is not None and again.metadata.to_dict() == {"agent": "ana"}
        assert again.last_response is not None
        first = caused_by(stripe_client, changed.last_response.headers["Request-Id"])
        second = caused_by(stripe_client, again.last_response.headers["Request-Id"])
        assert set(first) == set(second) == {"refund.updated"}
        before_first = first["refund.updated"].data.previous_attributes
        before_second = second["refund.updated"].data.previous_attributes
        assert before_first is not None and before_second is not None
        assert before_first.to_dict() == {"metadata": {"ticket": "T-1"}}
        assert before_second.to_dict() == {"metadata": {"ticket": "T-1", "agent": "ana"}}
        assert second["refund.updated"].data.object.metadata.to_dict() == {"agent": "ana"}

    def test_an_update_that_changes_nothing_appends_no_event(self, stripe_client, charge):
        refund = stripe_client.v1.refunds.create(
            params={"charge": charge.id, "amount": 100, "metadata": {"ticket": "T-1"}}
        )
        before = Event.objects.count()

        same = stripe_client.v1.refunds.update(refund.id, params={"metadata": {"ticket": "T-1"}})
        bare = stripe_client.v1.refunds.update(refund.id)

        assert same.metadata.to_dict() == bare.metadata.to_dict() == {"ticket": "T-1"}
        assert Event.objects.count() == before

    def test_updating_a_refund_needs_a_key_that_may_write(self, live_server, stripe_client, charge):
        refund = stripe_client.v1.refunds.create(params={"charge": charge.id, "amount": 100})
        secret = create_api_key(name="reporting", read_only=True)[1]
        reader = stripe.StripeClient(
            secret, base_addresses={"api": live_server.url}, max_network_retries=0
        )

        with pytest.raises(stripe.PermissionError):
            reader.v1.refunds.update(refund.id, params={"metadata": {"a": "b"}})
        with pytest.raises(stripe.InvalidRequestError) as missing:
            stripe_client.v1.refunds.update("re_nope", params={"metadata": {"a": "b"}})

        assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")
        assert stripe_client.v1.refunds.retrieve(refund.id).metadata.to_dict() == {}
