"""Webhook signing secrets at rest (issue 27, build 2): encrypted with WEBHOOK_SECRET_KEYS
(MultiFernet), signed with in plain text, rotated with rotate_webhook_secrets, and encrypted
in place by the migration that brought encryption."""

from __future__ import annotations

import io
from urllib.parse import urlencode

import pytest
import stripe
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ledger_app.events.delivery import deliver_due
from ledger_app.models import Event, WebhookEndpoint
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db

SECRET = "whsec_TheClientsOwnSigningSecret0123456789"
OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def stored(endpoint: WebhookEndpoint) -> str:
    """The column as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM ledger_app_webhookendpoint WHERE id = %s", [endpoint.pk])
        return cursor.fetchone()[0]


def make_endpoint(url: str = "https://hooks.example.com/refunds") -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(url=url, enabled_events=["*"], secret=SECRET)


def read(endpoint: WebhookEndpoint) -> str:
    return WebhookEndpoint.objects.get(pk=endpoint.pk).secret


class TestAtRest:
    def test_the_column_holds_a_token_never_the_secret(self):
        endpoint = make_endpoint()

        token = stored(endpoint)

        assert token.startswith("gAAAAA") and SECRET not in token and "whsec_" not in token
        assert read(endpoint) == SECRET

    def test_no_lookup_on_the_column_matches_the_secret(self):
        """Defence in depth: even where the admin's guard is not (a shell, a new view), a
        lookup compares against tokens, which differ at every write."""
        make_endpoint()

        assert WebhookEndpoint.objects.filter(secret=SECRET).count() == 0
        assert WebhookEndpoint.objects.filter(secret__startswith="whsec_").count() == 0
        assert WebhookEndpoint.objects.filter(secret__contains="Client").count() == 0

    def test_the_same_secret_is_a_different_token_each_time(self):
        first, second = make_endpoint(), make_endpoint()

        assert stored(first) != stored(second)

    def test_an_endpoint_made_through_the_api_is_encrypted_and_shown_once(
        self, api, receiver, allow_private
    ):
        created = api.post(
            "/v1/webhook_endpoints",
            urlencode({"url": receiver.url, "enabled_events[]": "*"}),
            content_type="application/x-www-form-urlencoded",
        ).json()
        endpoint = WebhookEndpoint.objects.get(pk=created["id"])

        assert created["secret"].startswith("whsec_") and read(endpoint) == created["secret"]
        assert created["secret"] not in stored(endpoint)
        assert "secret" not in api.get(f"/v1/webhook_endpoints/{endpoint.pk}").json()


def test_a_delivery_is_signed_with_the_secret_as_the_client_knows_it(
    endpoint, receiver, worker_dispatch
):
    create_refund(RefundRequest(charge_id=ChargeFactory(amount=5_000).id, amount=1_200))
    deliver_due()
    event = Event.objects.get(type="refund.created")
    received = next(r for r in receiver.received if r.event_id == event.id)
    secret_the_client_was_shown = read(endpoint)

    verified = stripe.Webhook.construct_event(
        received.body, received.signature, secret_the_client_was_shown
    )

    assert verified.id == event.id
    assert secret_the_client_was_shown not in stored(endpoint)


class TestRotation:
    """docs/operating/secrets.md: put a new key first, run rotate_webhook_secrets, then
    remove the old key."""

    def test_a_new_key_in_front_then_the_command_then_the_old_key_removed(self, settings):
        settings.WEBHOOK_SECRET_KEYS = [OLD]
        endpoint = make_endpoint()
        under_old = stored(endpoint)

        settings.WEBHOOK_SECRET_KEYS = [NEW, OLD]
        assert read(endpoint) == SECRET  # the old token still reads
        call_command("rotate_webhook_secrets", "--dry-run", stdout=io.StringIO())
        assert stored(endpoint) == under_old  # a dry run writes nothing
        call_command("rotate_webhook_secrets", stdout=(said := io.StringIO()))
        assert said.getvalue() == "re-encrypted 1 webhook signing secret\n"
        settings.WEBHOOK_SECRET_KEYS = [NEW]

        assert read(endpoint) == SECRET
        assert stored(endpoint) != under_old
        assert Fernet(NEW).decrypt(stored(endpoint).encode()).decode() == SECRET

    def test_a_key_removed_too_early_is_said_plainly_and_names_no_secret(self, settings):
        settings.WEBHOOK_SECRET_KEYS = [OLD]
        endpoint = make_endpoint()
        settings.WEBHOOK_SECRET_KEYS = [NEW]

        with pytest.raises(ImproperlyConfigured, match="rotate_webhook_secrets") as raised:
            read(endpoint)
        with pytest.raises(CommandError, match=f"Endpoint {endpoint.pk} was left as it was"):
            call_command("rotate_webhook_secrets")

        assert SECRET not in str(raised.value) and NEW not in str(raised.value)
        settings.WEBHOOK_SECRET_KEYS = [OLD]
        assert read(endpoint) == SECRET  # nothing was lost

    def test_from_the_derived_key_to_keys_of_their_own_in_two_steps(self, settings):
        settings.WEBHOOK_SECRET_KEYS = []
        endpoint = make_endpoint()  # under the key derived from DJANGO_SECRET_KEY

        settings.WEBHOOK_SECRET_KEYS = [NEW]
        assert read(endpoint) == SECRET
        call_command("rotate_webhook_secrets")

        assert Fernet(NEW).decrypt(stored(endpoint).encode()).decode() == SECRET

    def test_without_keys_of_their_own_djangos_key_rotation_keeps_them_readable(self, settings):
        settings.WEBHOOK_SECRET_KEYS = []
        settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "first-key-" + "x" * 40, []
        endpoint = make_endpoint()

        settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = (
            "second-key-" + "y" * 40,
            [settings.SECRET_KEY],
        )
        assert read(endpoint) == SECRET
        call_command("rotate_webhook_secrets")
        settings.SECRET_KEY_FALLBACKS = []

        assert read(endpoint) == SECRET


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_secrets_already_stored_and_backwards_decrypts_them():
    executor = MigrationExecutor(connection)
    before, after = (
        [("ledger_app", "0019_rate_counters")],
        [("ledger_app", "0020_webhook_secrets_encrypted")],
    )
    executor.migrate(before)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_app_webhookendpoint (id, url, enabled_events, description,"
            " metadata, status, secret, created_at) VALUES"
            " ('we_old', 'https://hooks.example.com/h', '[\"*\"]', '', '{}', 'enabled', %s,"
            " CURRENT_TIMESTAMP)",
            [SECRET],
        )
    try:
        executor.loader.build_graph()
        executor.migrate(after)
        # only the columns that migration knows (later ones add others)
        endpoint = WebhookEndpoint.objects.only("id", "secret").get(pk="we_old")
        assert stored(endpoint).startswith("gAAAAA") and endpoint.secret == SECRET

        executor.loader.build_graph()
        executor.migrate(before)
        assert stored(endpoint) == SECRET
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("ledger_app"))
        WebhookEndpoint.objects.filter(pk="we_old").delete()
