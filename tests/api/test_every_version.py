"""Issue 43: every published Stripe API version is answered, in its own shape, with every
field of Stripe's objects (tests/api/stripe_fields.py, the 2026-11-18 reference changed
back by Stripe's upgrade notes for older versions); a version newer than the server knows
is answered as the newest and says so; only what is not a version is refused."""

import json

import pytest
from django.test import Client

from ledger_app import api_versions
from ledger_app.access.api_keys import create_api_key
from ledger_app.events.delivery import deliver_due
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import Refund, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.api.books_rows import a_few_days_of_books
from tests.api.stripe_fields import problems
from tests.factories import ChargeFactory
from tests.processes import manage_alone
from tests.webhooks.receiver import Receiver

FORM = "application/x-www-form-urlencoded"
NEWEST = api_versions.LATEST


@pytest.fixture(autouse=True)
def many_requests(settings):
    """A walk over the versions sends more requests a second than a client is let."""
    settings.API_RATE_LIMIT = "100000/second"


def shapes() -> list[str]:
    """The first and the last version of each run of versions between two changes."""
    firsts = {change.version for change in api_versions.CHANGES}
    published = api_versions.PUBLISHED
    chosen = {published[0], published[-1]}
    for index, version in enumerate(published):
        if version in firsts:
            chosen |= {version, published[index - 1]}
    return [version for version in published if version in chosen]


def keyed() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {create_api_key(name='versions')[1]}")


@pytest.mark.django_db
class TestWhichVersionsAreAnswered:
    def test_the_table_holds_every_published_version_in_order(self):
        published = api_versions.PUBLISHED
        assert published[0] == "2011-01-01" and NEWEST == "2026-11-18.endive"
        assert len(published) == len(set(published)) == 130
        assert [v[:10] for v in published] == sorted(v[:10] for v in published)
        for pinned in ("2024-04-10", "2025-09-30.clover", "2026-10-28.endive"):
            assert pinned in published  # stripe-node 15.0.0, 19.0.0 and 23.1.0 pinned them
        assert all(c.version in published for c in api_versions.CHANGES)

    def test_every_published_version_lists_refunds(self):
        create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))
        client = keyed()

        for version in api_versions.PUBLISHED:
            response = client.get("/v1/refunds", HTTP_STRIPE_VERSION=version)

            assert response.status_code == 200, (version, response.content)
            assert response["Stripe-Version"] == version
            assert "Stripe-Version-Requested" not in response
            assert problems(response.json()["data"][0], "refund", version) == [], version

    def test_a_newer_version_is_answered_as_the_newest_and_says_so(self):
        charge = ChargeFactory()
        response = keyed().post(
            "/v1/refunds",
            f"charge={charge.id}&amount=100",
            content_type=FORM,
            HTTP_STRIPE_VERSION="2027-01-27.fig",
        )

        assert response.status_code == 200, response.content
        assert response["Stripe-Version"] == NEWEST
        assert response["Stripe-Version-Requested"] == "2027-01-27.fig"
        assert problems(response.json(), "refund", NEWEST) == []

    @pytest.mark.parametrize(
        "asked",
        [
            "banana",
            "2027-01-27",  # a later date without a release's name
            "2026-11-18.fig",  # the newest's date, another name
            "2024-10-28",  # a published version without its name
            "2023-01-01",  # a date nothing was published on
            "2027-02-30.fig",  # no such day
            "2027-01-27.Fig",
            "2027-01-27.fig ",
            "２０２７-01-27.fig",
            "2099-01-01",
            "2022-11-15.nope",
            "",
            "x" * 300,
        ],
    )
    def test_what_is_not_a_version_is_refused_with_stripes_error(self, asked):
        charge = ChargeFactory()
        response = keyed().post(
            "/v1/refunds",
            f"charge={charge.id}&amount=100",
            content_type=FORM,
            HTTP_STRIPE_VERSION=asked,
            HTTP_IDEMPOTENCY_KEY="v-1",
        )

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "api_version_invalid")
        assert NEWEST in error["message"]
        assert response["Stripe-Version"] == NEWEST
        assert not Refund.objects.exists()

    def test_keys_and_endpoints_take_the_account_default(self, settings):
        settings.DEFAULT_API_VERSION = "2024-06-20"
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        client = keyed()

        made = client.post(
            "/v1/webhook_endpoints",
            "url=https://8.8.8.8/h&enabled_events[]=*",
            content_type=FORM,
            HTTP_STRIPE_VERSION="2022-11-15",  # the request's version is not the endpoint's
        ).json()
        pinned = client.post(
            "/v1/webhook_endpoints",
            "url=https://8.8.8.8/h&enabled_events[]=*&api_version=2023-08-16",
            content_type=FORM,
        ).json()

        assert made["api_version"] == "2024-06-20" and pinned["api_version"] == "2023-08-16"
        assert create_api_key(name="defaulted")[0].api_version == "2024-06-20"
        assert keyed().get("/v1/charges")["Stripe-Version"] == "2024-06-20"


@pytest.mark.django_db(transaction=True)
class TestEveryObjectInEveryVersion:
    """Refunds in every status, charges in every status, PaymentIntents, the events of it
    all and a webhook endpoint, each read in every shape a version has: the versions
    between two changes of api_versions.CHANGES show the same shape, so the first and the
    last of each such run are read (every version's answer is checked above)."""

    def test_every_object_has_every_field_of_its_version(self, api, every_refund_status):
        declined = api.post(
            "/v1/charges",
            json.dumps(
                {"amount": 500, "currency": "usd", "metadata": {"simulate_charge": "decline"}}
            ),
            content_type="application/json",
        ).json()["error"]["charge"]
        charge = api.get(f"/v1/charges/{declined}").json()
        intent_ids = {charge["payment_intent"]} | {
            r["payment_intent"] for r in every_refund_status.values()
        }
        endpoint = create_endpoint(url="https://8.8.8.8/h", enabled_events=["*"])
        seen: dict[str, set[str]] = {"intent statuses": set(), "event types": set()}
        for version in shapes():
            asked = {"HTTP_STRIPE_VERSION": version}
            for refund in every_refund_status.values():
                shown = api.get(f"/v1/refunds/{refund['id']}", **asked).json()
                assert problems(shown, "refund", version) == [], (version, shown)
            for shown in api.get("/v1/charges", {"limit": 100}, **asked).json()["data"]:
                assert problems(shown, "charge", version) == [], (version, shown["id"])
                embedded = shown.get("refunds") or {}
                for item in embedded if isinstance(embedded, list) else embedded.get("data", []):
                    assert problems(item, "refund", version) == [], version
            for intent_id in intent_ids - {None}:
                shown = api.get(f"/v1/payment_intents/{intent_id}", **asked).json()
                assert problems(shown, "payment_intent", version) == [], (version, shown)
                seen["intent statuses"].add(shown["status"])
            for event in api.get("/v1/events", {"limit": 100}, **asked).json()["data"]:
                assert problems(event, "event", version) == [], (version, event["type"])
                inner = event["data"]["object"]
                assert problems(inner, inner["object"], version) == [], (version, event["type"])
                seen["event types"].add(event["type"])
            shown = api.get(f"/v1/webhook_endpoints/{endpoint.id}", **asked).json()
            assert problems(shown, "webhook_endpoint", version) == [], version
        assert {"succeeded", "requires_payment_method", "requires_source"} <= seen[
            "intent statuses"
        ]
        assert {"refund.created", "refund.failed", "charge.refund.updated"} <= seen["event types"]

    def test_balance_transactions_are_the_same_in_every_version(self, api):
        """Stripe's upgrade notes change nothing of a balance transaction or a payout."""
        moved = a_few_days_of_books().moved
        newest = api.get("/v1/balance_transactions").json()["data"]
        payouts = api.get("/v1/payouts").json()["data"]

        for version in shapes():
            asked = {"HTTP_STRIPE_VERSION": version}
            shown = api.get("/v1/balance_transactions", **asked).json()["data"]
            assert [bt["id"] for bt in shown] == moved and shown == newest, version
            for bt in shown:
                assert problems(bt, "balance_transaction", version) == [], (version, bt["id"])
            assert api.get("/v1/payouts", **asked).json()["data"] == payouts, version


@pytest.mark.django_db
class TestVersionChanges:
    def test_an_intent_carries_its_charges_before_2022_11_15(self, api):
        charge = ChargeFactory()
        create_refund(RefundRequest(charge_id=charge.id, amount=100))
        url = f"/v1/payment_intents/{charge.payment_intent}"

        old = api.get(url, HTTP_STRIPE_VERSION="2022-08-01").json()
        new = api.get(url, HTTP_STRIPE_VERSION="2022-11-15").json()

        assert [c["id"] for c in old["charges"]["data"]] == [charge.id]
        assert old["charges"]["url"] == f"/v1/charges?payment_intent={charge.payment_intent}"
        assert old["charges"]["data"][0]["refunds"]["data"][0]["amount"] == 100
        assert "charges" not in new and new["latest_charge"] == charge.id

    def test_expand_latest_charge(self, api):
        charge = ChargeFactory()
        url = f"/v1/payment_intents/{charge.payment_intent}"

        shown = api.get(url, {"expand[]": "latest_charge"}).json()
        old = api.get(url, {"expand[]": "latest_charge"}, HTTP_STRIPE_VERSION="2020-08-27").json()

        assert shown["latest_charge"]["id"] == charge.id
        assert problems(shown["latest_charge"], "charge") == []
        assert "refunds" in old["latest_charge"]  # in that version's shape

    def test_older_shapes_of_charges_and_events(self, api):
        charge = ChargeFactory()
        create_refund(RefundRequest(charge_id=charge.id, amount=100, idempotency_key="v-old-1"))
        ask = {"HTTP_STRIPE_VERSION": "2014-01-31"}

        old_charge = api.get(f"/v1/charges/{charge.id}", **ask).json()
        events = api.get("/v1/events", **ask).json()["data"]
        new_events = api.get("/v1/events").json()["data"]

        assert old_charge["status"] == "paid" and old_charge["card"] is None
        assert "source" not in old_charge and "statement_descriptor" not in old_charge
        assert old_charge["statement_description"] is None
        assert [r["amount"] for r in old_charge["refunds"]] == [100]  # an array then
        created = next(e for e in new_events if e["type"] == "charge.refunded")
        assert created["request"]["idempotency_key"] == "v-old-1"
        told = next(e for e in events if e["id"] == created["id"])
        assert told["request"] == created["request"]["id"]  # the id alone before 2017-05-25
        assert {"refund.created", "refund.updated"} <= {e["type"] for e in new_events}
        assert not {"refund.created", "refund.updated"} & {e["type"] for e in events}

    def test_event_filters_take_the_versions_names(self, api):
        refund = create_refund(
            RefundRequest(
                charge_id=ChargeFactory(metadata={"simulate_refund": "decline"}).id, amount=100
            )
        ).item
        old = {"HTTP_STRIPE_VERSION": "2020-08-27"}

        told = api.get("/v1/events", {"type": "charge.refund.updated"}, **old).json()["data"]
        under_charge = api.get("/v1/events", {"type": "charge.*"}, **old).json()["data"]
        hidden = api.get("/v1/events", {"type": "refund.failed"}, **old).json()["data"]
        newest = api.get("/v1/events", {"type": "charge.refund.updated"}).json()["data"]

        assert [e["data"]["object"]["id"] for e in told] == [refund.id]
        assert told[0]["data"]["object"]["status"] == "failed"
        assert "charge.refund.updated" in {e["type"] for e in under_charge}
        assert hidden == [] and newest == []


@pytest.mark.django_db(transaction=True)
class TestWebhooksPerVersion:
    def test_a_failed_refund_is_charge_refund_updated_before_acacia(self, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        old_receiver, new_receiver = Receiver().start(), Receiver().start()
        try:
            create_endpoint(
                url=old_receiver.url,
                enabled_events=["charge.refund.updated"],
                api_version="2020-08-27",
            )
            create_endpoint(
                url=new_receiver.url, enabled_events=["refund.updated", "charge.refund.updated"]
            )
            charge = ChargeFactory(metadata={"simulate_refund": "decline"})
            refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
            deliver_due()
            old_receiver.wait_for(1)
            new_receiver.wait_for(1)
        finally:
            old_receiver.stop()
            new_receiver.stop()

        assert Refund.objects.get(pk=refund.pk).status == "failed"
        old = [json.loads(r.body) for r in old_receiver.received]
        new = [json.loads(r.body) for r in new_receiver.received]
        assert [(e["type"], e["api_version"]) for e in old] == [
            ("charge.refund.updated", "2020-08-27")
        ]
        assert old[0]["data"]["object"]["status"] == "failed"
        assert isinstance(old[0]["request"], dict)  # 2020-08-27 is after 2017-05-25
        assert [e["type"] for e in new] == ["refund.updated"]
        assert new[0]["data"]["object"]["failure_reason"] in {"declined", "unknown"}
        assert WebhookEndpoint.objects.count() == 2


class TestTheCheckerCatches:
    """stripe_fields.problems, given objects with a planted defect."""

    def test_a_missing_field_a_bad_value_and_a_field_of_another_version(self):
        refund = {
            "id": "re_1",
            "object": "refund",
            "amount": 1,
            "balance_transaction": None,
            "charge": "ch_1",
            "created": 1,
            "currency": "usd",
            "customer": None,
            "customer_account": None,
            "metadata": {},
            "payment_intent": None,
            "payment_method": None,
            "reason": "because",
            "receipt_number": None,
            "source_transfer_reversal": None,
            "status": "refunded",
            "transfer_reversal": None,
            "destination_details": {"type": "card", "card": {"reference_status": "available"}},
        }
        charge_then = {"object": "charge", "status": "succeeded", "refunds": None}

        found = problems(refund, "refund")

        assert "refund.application: always there in 2026-11-18.endive, missing" in found
        assert any(line.startswith("refund.reason: 'because'") for line in found)
        assert any(line.startswith("refund.status: 'refunded'") for line in found)
        assert any("destination_details.card" in line for line in found)
        old = problems(charge_then, "charge", "2014-01-31")
        assert "charge.card: always there in 2014-01-31, missing" in old
        assert any(line.startswith("charge.status: 'succeeded'") for line in old)
        assert any(line.startswith("charge.refunds: null") for line in old)


@pytest.mark.parametrize("value", ["banana", "2027-01-27.fig", "2024-10-28"])
def test_an_account_default_that_is_not_published_stops_start_up(value):
    env = {"DJANGO_DEBUG": "true", "DJANGO_DOTENV": "false", "DEFAULT_API_VERSION": value}

    result = manage_alone("check", env=env)

    assert result.returncode != 0
    assert "DEFAULT_API_VERSION must be a published Stripe API version" in result.stderr
    assert manage_alone("check", env={**env, "DEFAULT_API_VERSION": "2024-06-20"}).returncode == 0
