"""Concurrent HTTP clients on PostgreSQL: one key at one moment makes one refund."""

import threading

import pytest
import requests
from django.db import connection, transaction

from ledger_app.access.api_keys import PREFIX_LENGTH
from ledger_app.idempotency import services as idempotency
from ledger_app.models import IdempotencyRecord, Refund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
CLIENTS = 16


def post_at_once(url: str, key: str, bodies: list[dict], idem_keys: list[str]) -> list:
    barrier = threading.Barrier(len(bodies))
    results: list = [None] * len(bodies)

    def send(index: int) -> None:
        with requests.Session() as session:
            barrier.wait(timeout=30)
            results[index] = session.post(
                url,
                data=bodies[index],
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idem_keys[index]},
                timeout=60,
            )

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not any(t.is_alive() for t in threads)
    return results


def refund_3000_at_once(live_server, api_key: str, charge, idem_keys: list[str]) -> list:
    """CLIENTS requests to refund 3,000 of `charge`, one per key in `idem_keys`."""
    body = {"charge": charge.id, "amount": "3000"}
    return post_at_once(f"{live_server.url}/v1/refunds", api_key, [body] * CLIENTS, idem_keys)


def test_sixteen_clients_with_one_key_at_the_same_moment_make_one_refund(live_server, api_key):
    charge = ChargeFactory(amount=10_000)

    responses = refund_3000_at_once(live_server, api_key, charge, ["same-key"] * CLIENTS)

    assert [r.status_code for r in responses] == [200] * CLIENTS, [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    replayed = [r.headers.get("Idempotent-Replayed") == "true" for r in responses]
    assert replayed.count(False) == 1
    charge.refresh_from_db()
    assert charge.amount_refunded == 3_000
    assert Refund.objects.count() == 1
    assert_ledger_invariants()


def test_sixteen_clients_with_own_keys_never_over_refund(live_server, api_key):
    charge = ChargeFactory(amount=10_000)

    responses = refund_3000_at_once(
        live_server, api_key, charge, [f"key-{n}" for n in range(CLIENTS)]
    )

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 3 + [400] * (CLIENTS - 3)
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 400} == {
        "amount_too_large"
    }
    charge.refresh_from_db()
    assert charge.amount_refunded == 9_000
    assert_ledger_invariants()


def test_a_key_still_held_by_a_running_request_is_409_in_use(api, api_key, settings):
    """The first request holds the key past the lock timeout: the second is told to retry,
    and no second refund is made."""
    charge = ChargeFactory(amount=10_000)
    holding, release = threading.Event(), threading.Event()

    def first_request_holding_the_key():
        try:
            with transaction.atomic():
                request = idempotency.IdempotentRequest.build(
                    key="k-busy",
                    owner=f"api_key:{api_key[:PREFIX_LENGTH]}",  # the same client's key
                    operation="refund.create",
                    params={
                        "charge": charge.id,
                        "amount": 100,
                        "reason": "",
                        "metadata": {},
                        "note": "",
                    },
                )
                idempotency.claim(request, new_id="re_placeholder")
                holding.set()
                release.wait(30)
                transaction.set_rollback(True)
        finally:
            connection.close()

    holder = threading.Thread(target=first_request_holding_the_key)
    holder.start()
    try:
        assert holding.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 300")
        response = api.post(
            "/v1/refunds",
            f"charge={charge.id}&amount=100",
            content_type="application/x-www-form-urlencoded",
            HTTP_IDEMPOTENCY_KEY="k-busy",
        )
    finally:
        release.set()
        holder.join(30)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_key_in_use"
    assert response["Stripe-Should-Retry"] == "true"
    assert Refund.objects.count() == 0
    assert not IdempotencyRecord.objects.exists()
