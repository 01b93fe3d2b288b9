"""Access control, enumerated from the URL configuration so a new endpoint or admin URL
cannot be missed: every API endpoint refuses a missing, wrong or revoked key (401) and a
read-only key's writes (403); every admin URL about refunds refuses staff without the
permission (403); secrets are nowhere in the database; ids cannot be guessed."""

from __future__ import annotations

import math
from collections import Counter
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.test import Client

from ledger_app.access.api_keys import create_api_key, revoke_api_key
from ledger_app.models import (
    ApiKey,
    BalanceTransaction,
    Charge,
    Event,
    Payout,
    Refund,
    WebhookEndpoint,
    new_charge_id,
    new_refund_id,
)
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund
from tests import tally
from tests.api.books_rows import balance_transaction, books_as_they_are, payout
from tests.api_routes import FORM, api_endpoints, send, walk
from tests.factories import ChargeFactory
from tests.invariants import books, rows_written
from tests.second_factor import verified

pytestmark = pytest.mark.django_db


def fill(route: str, charge: Charge, refund: Refund) -> str:
    route = route.replace("<str:charge_id>", charge.id).replace("<str:refund_id>", refund.id)
    event = Event.objects.filter(refund=refund).first()
    assert event is not None
    route = route.replace("<str:event_id>", event.id)
    route = route.replace("<str:intent_id>", charge.payment_intent)
    endpoint = WebhookEndpoint.objects.get_or_create(
        url="https://hooks.example.com/ledger", defaults={"secret": "whsec_matrix"}
    )[0]
    route = route.replace("<str:endpoint_id>", endpoint.id)
    route = route.replace("<str:balance_transaction_id>", BalanceTransaction.objects.get().pk)
    route = route.replace("<str:payout_id>", Payout.objects.get().pk)
    return route.replace("<path:object_id>", "{object_id}")


@pytest.fixture
def url_objects(inline_dispatch):
    """(charge, refund, snapshot): an object for every URL here to find, and what a refused
    request must leave as it was (every table's rows, the charge's books and the provider's
    balance transactions and payouts)."""
    # A refund left unknown by a provider timeout: it is in the attention queue too, so
    # every refund admin URL finds its object and answers for the permission alone.
    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "timeout"})
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
    assert refund.status == "unknown"
    sent = create_refund(RefundRequest(charge_id=ChargeFactory(amount=1_000).id, amount=100)).item
    assert sent.status == "succeeded"  # and the simulated provider holds its record
    # the provider's balance transaction of it and its payout, as sync_provider mirrors them
    balance_transaction("txn_matrix", type="refund", source="re_matrix", payout="po_matrix")
    payout("po_matrix")

    return charge, refund, lambda: (rows_written(), books(charge), books_as_they_are())


def test_the_api_has_the_endpoints_this_file_checks():
    paths = {path for path, _ in api_endpoints()}
    assert paths == {
        "/v1/charges",
        "/v1/charges/<str:charge_id>",
        "/v1/charges/<str:charge_id>/refunds",
        "/v1/refunds",
        "/v1/refunds/<str:refund_id>",
        "/v1/refunds/<str:refund_id>/cancel",
        "/v1/events",
        "/v1/events/<str:event_id>",
        "/v1/payment_intents/<str:intent_id>",
        "/v1/webhook_endpoints",
        "/v1/webhook_endpoints/<str:endpoint_id>",
        "/v1/balance_transactions",
        "/v1/balance_transactions/<str:balance_transaction_id>",
        "/v1/payouts",
        "/v1/payouts/<str:payout_id>",
    }


@pytest.mark.parametrize("credential", ["none", "wrong", "revoked", "basic-wrong"])
def test_every_api_endpoint_and_method_without_a_valid_key_is_401(
    client, url_objects, credential, settings
):
    charge, refund, snapshot = url_objects
    # more wrong keys from one address than it is let send (test_auth_failure_limit.py)
    settings.API_AUTH_FAILURE_LIMIT = "1000/minute"
    key, secret = create_api_key(name="soon revoked")
    revoke_api_key(prefix=key.prefix)
    header = {
        "none": None,
        "wrong": "Bearer sk_live_" + "0" * 40,
        "revoked": f"Bearer {secret}",
        "basic-wrong": "Basic c2tfbGl2ZV9ub3BlOg==",
    }[credential]
    headers = {"HTTP_AUTHORIZATION": header} if header else {}
    before = snapshot()
    checked = 0

    for route, methods in api_endpoints():
        for method in methods:
            response = send(client, method, fill(route, charge, refund), **headers)
            assert response.status_code == 401, (method, route, response.content)
            assert response.json()["error"]["code"] in {"api_key_missing", "api_key_invalid"}
            assert "WWW-Authenticate" in response
            checked += 1

    assert checked >= 6 and snapshot() == before
    tally.add("access", operations=checked, invariant_checks=1)


def test_a_read_only_key_reads_everywhere_and_writes_nowhere(client, url_objects):
    charge, refund, snapshot = url_objects
    headers = {"HTTP_AUTHORIZATION": f"Bearer {create_api_key(name='ro', read_only=True)[1]}"}
    before = snapshot()
    writes = 0

    for route, methods in api_endpoints():
        path = fill(route, charge, refund)
        if "get" in methods:
            assert send(client, "get", path, **headers).status_code == 200, route
        for method in set(methods) - {"get"}:
            response = send(client, method, path, **headers)
            assert response.status_code in (403, 405), (method, route)
            if response.status_code == 403:
                assert response.json()["error"]["code"] == "api_key_read_only"
                writes += 1

    assert writes >= 2 and snapshot() == before  # POST /v1/charges and /v1/refunds
    tally.add("access", operations=writes, invariant_checks=1)


def admin_refund_urls(charge: Charge, refund: Refund) -> list[tuple[str, str]]:
    """(name, url) of every admin URL about refunds, with ids filled in."""
    urls = []
    for route, pattern in walk(admin.site.get_urls()):
        if not pattern.name or "refund" not in pattern.name:
            continue
        object_id = charge.pk if pattern.name.startswith("ledger_app_charge") else refund.pk
        if pattern.name.startswith("simulated_provider"):
            object_id = str(ProviderRefund.objects.get().pk)
        path = "/admin/" + route.replace("<path:object_id>", quote(object_id))
        urls.append((pattern.name, path))
    return urls


@pytest.fixture
def staff_without_permissions(django_user_model):
    """Staff with no permissions, signed in with a code: refused for the permission."""
    user = django_user_model.objects.create_user("bare", password="bare-pass-123", is_staff=True)
    return verified(Client(), user)


def assert_forbidden(client: Client, requests: list[tuple[str, str]]) -> None:
    form = {"amount": "1.00", "reason": "duplicate", "idempotency_key": "admin:x"}
    for method, url in requests:
        response = getattr(client, method)(url, form if method == "post" else None)
        assert response.status_code == 403, (method, url, response.status_code)


def test_staff_without_permissions_get_403_on_every_refund_url(
    staff_without_permissions, url_objects
):
    charge, refund, snapshot = url_objects
    before = snapshot()
    urls = admin_refund_urls(charge, refund)

    assert_forbidden(
        staff_without_permissions, [(m, url) for _, url in urls for m in ("get", "post")]
    )

    names = {name for name, _ in urls}
    assert {
        "ledger_app_charge_refund",
        "ledger_app_refund_add",
        "ledger_app_refund_change",
    } <= names
    assert snapshot() == before
    tally.add("access", operations=2 * len(urls), invariant_checks=1)


def test_staff_who_may_only_look_get_403_on_every_url_that_refunds(viewer_client, url_objects):
    charge, refund, snapshot = url_objects
    before = snapshot()
    charge_refund = f"/admin/ledger_app/charge/{quote(charge.pk)}/refund/"
    writing = [
        ("get", charge_refund),
        ("post", charge_refund),
        ("get", "/admin/ledger_app/refund/add/"),
        ("post", "/admin/ledger_app/refund/add/"),
        ("post", f"/admin/ledger_app/refund/{quote(refund.pk)}/change/"),
        ("get", f"/admin/ledger_app/refund/{quote(refund.pk)}/delete/"),
        ("post", f"/admin/ledger_app/refund/{quote(refund.pk)}/delete/"),
    ]

    assert_forbidden(viewer_client, writing)

    assert snapshot() == before
    tally.add("access", operations=len(writing), invariant_checks=1)


def test_no_api_secret_is_stored_anywhere_in_the_database(client, url_objects):
    """Not only ApiKey: every text column of every table, after the key has been used."""
    charge, _, _ = url_objects
    _, secret = create_api_key(name="order-service")
    used = client.post(
        "/v1/refunds",
        urlencode({"charge": charge.id, "amount": "50"}),
        content_type=FORM,
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_IDEMPOTENCY_KEY="access-1",
    )
    assert used.status_code == 200
    body = secret.split("_")[-1]  # the random part, whatever prefix it is shown with

    found = []
    for model in apps.get_models():
        for row in model._default_manager.values():
            if any(body in str(value) for value in row.values()):
                found.append(model.__name__)
    assert found == []
    assert ApiKey.objects.filter(name="order-service").count() == 1
    tally.add("access", invariant_checks=1)


@pytest.mark.parametrize("make", [new_charge_id, new_refund_id])
def test_ids_cannot_be_guessed(make):
    ids = [make() for _ in range(5_000)]
    prefix = ids[0][:3]
    bodies = [i[len(prefix) :] for i in ids]

    assert len(set(ids)) == len(ids)
    assert all(i.startswith(prefix) for i in ids)
    alphabet = set("".join(bodies))
    bits = len(bodies[0]) * math.log2(len(alphabet))
    assert bits >= 96, f"{bits:.0f} bits of randomness"
    # Not a counter or a clock: consecutive ids share no long common beginning, and every
    # position takes many values.
    common = max(len(_common_prefix(a, b)) for a, b in zip(bodies, bodies[1:], strict=False))
    assert common <= 6, common
    for position in range(len(bodies[0])):
        counts = Counter(b[position] for b in bodies)
        assert len(counts) >= min(len(alphabet), 16), position


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
