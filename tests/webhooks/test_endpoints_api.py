"""/v1/webhook_endpoints with the official stripe package against the running server, and
the wire details the package does not show (form lists, JSON, errors)."""

import json
from urllib.parse import urlencode

import pytest
import stripe

from ledger_app import api_versions
from ledger_app.events.event_types import STRIPE_EVENT_TYPES
from ledger_app.models import EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.webhooks.conftest import record_events

pytestmark = pytest.mark.usefixtures("allow_private")

FORM = "application/x-www-form-urlencoded"
STRIPE_KEYS = {
    "api_version",
    "application",
    "created",
    "description",
    "enabled_events",
    "id",
    "livemode",
    "metadata",
    "object",
    "status",
    "url",
}


@pytest.mark.django_db(transaction=True)
class TestWithTheStripeClient:
    def test_create_shows_the_secret_once_retrieve_never(self, stripe_client, receiver):
        created = stripe_client.v1.webhook_endpoints.create(
            params={
                "url": receiver.url,
                "enabled_events": ["refund.created", "refund.updated"],
                "description": "Orders service",
                "metadata": {"team": "orders"},
            }
        )
        fetched = stripe_client.v1.webhook_endpoints.retrieve(created.id)

        assert created.secret.startswith("whsec_") and len(created.secret) > 30
        assert set(created.to_dict()) == STRIPE_KEYS | {"secret"}
        assert set(fetched.to_dict()) == STRIPE_KEYS
        assert "secret" not in fetched
        assert (fetched.object, fetched.status, fetched.url) == (
            "webhook_endpoint",
            "enabled",
            receiver.url,
        )
        assert fetched.enabled_events == ["refund.created", "refund.updated"]
        assert fetched.description == "Orders service"
        assert fetched.metadata.to_dict() == {"team": "orders"}
        assert fetched.livemode is False
        assert fetched.api_version == api_versions.LATEST  # the account's default
        assert WebhookEndpoint.objects.get(pk=created.id).secret == created.secret

    def test_list_update_and_delete(self, stripe_client, receiver):
        ids = [
            stripe_client.v1.webhook_endpoints.create(
                params={"url": f"{receiver.url}/{n}", "enabled_events": ["*"]}
            ).id
            for n in range(3)
        ]

        listed = stripe_client.v1.webhook_endpoints.list(params={"limit": 2})
        walked = [e.id for e in listed.auto_paging_iter()]
        updated = stripe_client.v1.webhook_endpoints.update(
            ids[0],
            params={
                "url": f"{receiver.url}/new",
                "enabled_events": ["charge.refunded"],
                "disabled": True,
                "metadata": {"a": "1"},
            },
        )
        deleted = stripe_client.v1.webhook_endpoints.delete(ids[1])

        assert [e.id for e in listed.data] == [ids[2], ids[1]] and listed.has_more
        assert listed.url == "/v1/webhook_endpoints"
        assert walked == list(reversed(ids))
        assert (updated.url, updated.status, updated.enabled_events) == (
            f"{receiver.url}/new",
            "disabled",
            ["charge.refunded"],
        )
        assert "secret" not in updated
        assert (deleted.id, deleted.object, deleted.deleted) == (ids[1], "webhook_endpoint", True)
        remaining = stripe_client.v1.webhook_endpoints.list()
        assert [e.id for e in remaining.data] == [ids[2], ids[0]]
        with pytest.raises(stripe.InvalidRequestError) as missing:
            stripe_client.v1.webhook_endpoints.retrieve(ids[1])
        assert missing.value.http_status == 404
        assert missing.value.code == "resource_missing"

    def test_the_module_level_api(self, live_server, api_key, receiver):
        stripe.api_key, stripe.api_base = api_key, live_server.url
        stripe.max_network_retries = 0
        try:
            made = stripe.WebhookEndpoint.create(url=receiver.url, enabled_events=["*"])
            enabled = stripe.WebhookEndpoint.modify(made.id, disabled=False, description="x")
            listed = stripe.WebhookEndpoint.list()
            gone = stripe.WebhookEndpoint.delete(made.id)
            with pytest.raises(stripe.InvalidRequestError):
                stripe.WebhookEndpoint.retrieve(made.id)
        finally:
            stripe.api_key, stripe.api_base = None, "https://api.stripe.com"

        assert made.secret is not None and made.secret.startswith("whsec_")
        assert (enabled.status, enabled.description) == ("enabled", "x")
        assert [e.id for e in listed.data] == [made.id]
        assert gone.deleted is True

    def test_unknown_event_type_is_400_on_enabled_events(self, stripe_client, receiver):
        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.webhook_endpoints.create(
                params={"url": receiver.url, "enabled_events": ["charge.succeeded", "nope"]}
            )

        assert error.value.http_status == 400
        assert (error.value.code, error.value.param) == ("parameter_invalid", "enabled_events")
        assert not WebhookEndpoint.objects.exists()

    def test_every_event_type_stripe_documents_is_accepted(self, stripe_client, receiver):
        names = ["charge.updated", "charge.dispute.created", "payment_intent.succeeded"]

        made = stripe_client.v1.webhook_endpoints.create(
            params={"url": receiver.url, "enabled_events": names}
        )

        assert made.enabled_events == names
        assert len(STRIPE_EVENT_TYPES) > 180 and set(EventType.values) <= STRIPE_EVENT_TYPES
        charge = ChargeFactory()  # charge.succeeded: not one it asked for
        create_refund(
            RefundRequest(charge_id=charge.id, amount=100)
        )  # nor refund.* and charge.refunded
        assert not WebhookDelivery.objects.filter(endpoint_id=made.id).exists()

    def test_one_past_the_keys_limit_is_an_invalid_request_error(
        self, stripe_client, receiver, settings
    ):
        settings.WEBHOOK_ENDPOINTS_PER_KEY = 16
        made = [
            stripe_client.v1.webhook_endpoints.create(
                params={"url": receiver.url, "enabled_events": ["*"]}
            )
            for _ in range(16)
        ]

        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.webhook_endpoints.create(
                params={"url": receiver.url, "enabled_events": ["*"]}
            )

        assert len(made) == 16
        assert error.value.http_status == 400
        assert (error.value.code, error.value.param) == ("webhook_endpoint_limit_reached", None)
        assert "already has 16 webhook endpoints" in error.value.user_message
        assert WebhookEndpoint.objects.count() == 16

    def test_a_refused_url_is_400_url_invalid(self, stripe_client, settings):
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = False

        with pytest.raises(stripe.InvalidRequestError) as error:
            stripe_client.v1.webhook_endpoints.create(
                params={"url": "http://127.0.0.1:9/hooks", "enabled_events": ["*"]}
            )

        assert (error.value.code, error.value.param) == ("url_invalid", "url")
        assert "address 127.0.0.1 is loopback" in error.value.user_message


class TestOnTheWire:
    pytestmark = pytest.mark.django_db

    def create(self, api, body, content_type=FORM):
        return api.post("/v1/webhook_endpoints", body, content_type=content_type)

    @pytest.mark.parametrize(
        "events",
        [
            "enabled_events[]=refund.created&enabled_events[]=charge.refunded",
            "enabled_events[0]=refund.created&enabled_events[1]=charge.refunded",
        ],
    )
    def test_form_lists_in_either_bracket_form(self, api, events):
        response = self.create(api, f"url=http%3A%2F%2F127.0.0.1%3A9%2Fh&{events}")

        assert response.status_code == 200, response.content
        assert response.json()["enabled_events"] == ["refund.created", "charge.refunded"]

    def test_json_body(self, api):
        body = {"url": "https://127.0.0.1/h", "enabled_events": ["*"], "metadata": {"k": "v"}}

        response = self.create(api, json.dumps(body), "application/json")

        assert response.status_code == 200
        assert response.json()["metadata"] == {"k": "v"}

    @pytest.mark.parametrize(
        ("body", "code", "param"),
        [
            ({"url": "http://127.0.0.1/h"}, "parameter_missing", "enabled_events"),
            ({"enabled_events[]": "*"}, "parameter_missing", "url"),
            ({"url": "x", "enabled_events": "*"}, "parameter_invalid", "enabled_events"),
            ({"url": "ftp://127.0.0.1/h", "enabled_events[]": "*"}, "url_invalid", "url"),
            ({"url": "http:///h", "enabled_events[]": "*"}, "url_invalid", "url"),
            (
                {"url": "http://127.0.0.1/h", "enabled_events[]": "x"},
                "parameter_invalid",
                "enabled_events",
            ),  # fmt: skip
            (
                {"url": "http://127.0.0.1/h", "enabled_events[]": "*", "secret": "whsec_mine"},
                "parameter_unknown",
                "secret",
            ),  # fmt: skip
        ],
    )
    def test_refusals_name_the_parameter(self, api, body, code, param):
        response = self.create(api, urlencode(body))

        assert response.status_code == 400
        assert (response.json()["error"]["code"], response.json()["error"].get("param")) == (
            code,
            param,
        )
        assert not WebhookEndpoint.objects.exists()

    def test_update_refuses_a_non_boolean_disabled(self, api, endpoint):
        response = api.post(
            f"/v1/webhook_endpoints/{endpoint.id}", "disabled=yes", content_type=FORM
        )

        assert response.status_code == 400
        assert response.json()["error"]["param"] == "disabled"

    def test_update_merges_metadata_and_an_empty_value_removes_a_key(self, api, endpoint):
        path = f"/v1/webhook_endpoints/{endpoint.id}"
        api.post(path, "metadata[a]=1&metadata[b]=2", content_type=FORM)

        response = api.post(path, "metadata[a]=&metadata[c]=3", content_type=FORM)

        assert response.json()["metadata"] == {"b": "2", "c": "3"}

    def test_deleting_cancels_pending_deliveries_and_keeps_delivered_ones(self, api, endpoint):
        record_events(3)
        first = WebhookDelivery.objects.order_by("pk").first()
        assert first is not None
        WebhookDelivery.objects.filter(pk=first.pk).update(status="delivered")

        response = api.delete(f"/v1/webhook_endpoints/{endpoint.id}")
        again = api.delete(f"/v1/webhook_endpoints/{endpoint.id}")
        update = api.post(f"/v1/webhook_endpoints/{endpoint.id}", "", content_type=FORM)

        assert response.json() == {"id": endpoint.id, "object": "webhook_endpoint", "deleted": True}
        assert again.status_code == update.status_code == 404
        statuses = sorted(WebhookDelivery.objects.values_list("status", flat=True))
        assert statuses == ["canceled", "canceled", "canceled", "delivered"]
        record_events(1)  # a deleted endpoint is sent nothing new
        assert WebhookDelivery.objects.count() == 4

    def test_a_read_only_key_lists_but_cannot_create_update_or_delete(
        self, client, read_only_key, endpoint
    ):
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {read_only_key}"
        path = f"/v1/webhook_endpoints/{endpoint.id}"

        listed = client.get("/v1/webhook_endpoints")
        writes = [
            self.create(client, "url=http%3A%2F%2F127.0.0.1%2Fh&enabled_events[]=*"),
            client.post(path, "disabled=true", content_type=FORM),
            client.delete(path),
        ]

        assert listed.status_code == 200 and "secret" not in listed.json()["data"][0]
        assert [w.status_code for w in writes] == [403, 403, 403]
        assert WebhookEndpoint.objects.get().deleted_at is None
