"""Stripe API versions: a key's default, Stripe-Version per request (an unknown one is a
400 that writes nothing), the version named on every answer and event, webhook endpoints
rendered in their own version, and a charge's refunds embedded only before 2022-11-15 (so
the refund path does not read them, under the charge's lock, for current versions)."""

import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger_app import api_versions
from ledger_app.access.api_keys import create_api_key
from ledger_app.events.delivery import deliver_due
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import ApiKey, WebhookEndpoint
from ledger_app.refunds import services as refund_service
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.webhooks.receiver import Receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]
FORM = "application/x-www-form-urlencoded"
LEGACY, LATEST = api_versions.LEGACY, api_versions.LATEST


def keyed_client(version: str | None = None) -> Client:
    secret = create_api_key(name="versioned", api_version=version)[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


class TestWhichVersion:
    def test_a_key_answers_in_its_default_and_a_header_overrides_it(self):
        charge = ChargeFactory()
        old, new = keyed_client(LEGACY), keyed_client()

        as_old = old.get(f"/v1/charges/{charge.id}")
        as_new = new.get(f"/v1/charges/{charge.id}")
        old_asking_new = old.get(f"/v1/charges/{charge.id}", HTTP_STRIPE_VERSION="2022-11-15")

        assert "refunds" in as_old.json() and as_old["Stripe-Version"] == LEGACY
        assert "refunds" not in as_new.json() and as_new["Stripe-Version"] == LATEST
        assert "refunds" not in old_asking_new.json()
        assert old_asking_new["Stripe-Version"] == "2022-11-15"

    def test_every_answer_names_its_version(self):
        client = keyed_client()
        answers = [
            client.get("/v1/charges", HTTP_STRIPE_VERSION="2024-06-20"),
            client.get("/v1/nowhere", HTTP_STRIPE_VERSION="2024-06-20"),
            Client().get("/v1/charges", HTTP_STRIPE_VERSION="2024-06-20"),  # no key: 401
            client.get("/v1/charges", {"limit": 0}),
        ]

        assert [a.status_code for a in answers] == [200, 404, 401, 400]
        assert [a["Stripe-Version"] for a in answers] == ["2024-06-20"] * 3 + [LATEST]

    def test_events_carry_the_version_they_are_shown_in(self):
        create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))
        client = keyed_client()

        latest = client.get("/v1/events").json()["data"]
        old = client.get("/v1/events", HTTP_STRIPE_VERSION=LEGACY).json()["data"]

        assert {e["api_version"] for e in latest} == {LATEST}
        assert {e["api_version"] for e in old} == {LEGACY}
        refunded = [e for e in old if e["type"] == "charge.refunded"]
        assert refunded[0]["data"]["object"]["refunds"]["data"][0]["object"] == "refund"

    def test_an_old_readers_event_list_reads_the_charges_refunds_once_per_page(self):
        """Snapshots taken for current versions hold no refunds; an older reader's list
        reads them for the whole page at once, so its queries do not grow per event."""
        client = keyed_client(LEGACY)

        def queries_for_a_page_after(charges: int) -> int:
            for _ in range(charges):
                create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))
            with CaptureQueriesContext(connection) as queries:
                listed = client.get("/v1/events", {"limit": 100}).json()["data"]
            refunded = [e for e in listed if e["type"] == "charge.refunded"]
            assert len(refunded) >= charges
            assert all(e["data"]["object"]["refunds"]["data"] for e in refunded)
            return len(queries)

        assert queries_for_a_page_after(2) == queries_for_a_page_after(6)

    def test_the_command_makes_a_key_with_a_version(self, capsys):
        call_command("create_api_key", "old-service", "--api-version", LEGACY)

        assert ApiKey.objects.get(name="old-service").api_version == LEGACY
        assert f"API version {LEGACY}" in capsys.readouterr().err


@pytest.mark.django_db(transaction=True)
class TestWebhookEndpointsVersions:
    def test_each_endpoint_is_sent_events_in_its_own_version(self, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        old_receiver, new_receiver = Receiver().start(), Receiver().start()
        try:
            client = keyed_client()
            made = [
                client.post(
                    "/v1/webhook_endpoints",
                    json.dumps({"url": r.url, "enabled_events": ["*"], **extra}),
                    content_type="application/json",
                ).json()
                for r, extra in ((old_receiver, {"api_version": LEGACY}), (new_receiver, {}))
            ]
            assert [m["api_version"] for m in made] == [LEGACY, LATEST]
            create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))
            deliver_due()
            old_receiver.wait_for(3)
            new_receiver.wait_for(3)
        finally:
            old_receiver.stop()
            new_receiver.stop()

        def refunded(receiver) -> dict:
            bodies = [json.loads(r.body) for r in receiver.received]
            return next(b for b in bodies if b["type"] == "charge.refunded")

        old, new = refunded(old_receiver), refunded(new_receiver)
        assert (old["api_version"], new["api_version"]) == (LEGACY, LATEST)
        assert len(old["data"]["object"]["refunds"]["data"]) == 1  # as it was then
        assert "refunds" not in new["data"]["object"]

    def test_an_unknown_version_on_an_endpoint_is_refused(self, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True

        response = keyed_client().post(
            "/v1/webhook_endpoints",
            "url=https://8.8.8.8/h&enabled_events[]=*&api_version=2099-01-01",
            content_type=FORM,
        )

        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("api_version_invalid", "api_version")
        assert not WebhookEndpoint.objects.exists()


class TestTheReserveReadsRefundsOnlyForOldEndpoints:
    @pytest.fixture
    def reads(self, monkeypatch):
        calls = []
        real = refund_service._newest_refunds

        def counted(charge, refund):
            calls.append(charge.pk)
            return real(charge, refund)

        monkeypatch.setattr(refund_service, "_newest_refunds", counted)
        return calls

    def test_current_endpoints_need_no_read_of_newest_refunds(self, reads, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        create_endpoint(url="https://8.8.8.8/h", enabled_events=["*"])

        create_refund(RefundRequest(charge_id=ChargeFactory().id, amount=100))

        assert reads == []

    def test_an_old_endpoint_gets_the_refunds_as_they_were(self, reads, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        create_endpoint(url="https://8.8.8.8/h", enabled_events=["*"], api_version=LEGACY)
        charge = ChargeFactory()

        create_refund(RefundRequest(charge_id=charge.id, amount=100))

        assert reads == [charge.id]
