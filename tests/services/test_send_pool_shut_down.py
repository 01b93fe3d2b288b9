"""A send pool that takes no more work (its process is stopping) after a refund committed:
the API answers the refund `pending`, never a 500, and the worker sends it later."""

from __future__ import annotations

import concurrent.futures.thread
from concurrent.futures import ThreadPoolExecutor

import pytest

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Refund
from ledger_app.provider.dispatch import pool, process_pending_refunds
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api(client):
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {create_api_key(name='shop')[1]}"
    return client


@pytest.fixture
def inline_with_budget(settings):
    settings.REFUND_DISPATCH = "inline"
    settings.REFUND_INLINE_WAIT_SECONDS = 5  # the pool is used; nothing waits on it here
    return settings


@pytest.fixture
def pool_shut_down(inline_with_budget, monkeypatch):
    """The pool as stop_taking_sends leaves it under a request still running: shut down."""
    executor = ThreadPoolExecutor(max_workers=1)
    executor.shutdown()
    monkeypatch.setattr(pool, "_executor", executor)
    monkeypatch.setattr(pool, "_threads", inline_with_budget.REFUND_SEND_THREADS)


@pytest.fixture
def interpreter_shutting_down(inline_with_budget, monkeypatch):
    """What a gunicorn worker's interpreter is in once it exits: no executor schedules."""
    monkeypatch.setattr(pool, "_executor", None)
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)


def post_refund(api, charge, key: str):
    return api.post(
        "/v1/refunds",
        f"charge={charge.id}&amount=700",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY=key,
    )


@pytest.mark.parametrize("refusing", ["pool_shut_down", "interpreter_shutting_down"])
def test_a_committed_refund_the_pool_refuses_answers_pending(api, refusing, request):
    request.getfixturevalue(refusing)
    with pytest.raises(RuntimeError, match="cannot schedule new futures"):
        (pool._executor or ThreadPoolExecutor(max_workers=1)).submit(print)
    charge = ChargeFactory(amount=5_000)

    response = post_refund(api, charge, "k-stopping")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "pending"
    refund = Refund.objects.get(pk=body["id"])
    # Nothing queued, no lease, no attempt: the worker may send it at once.
    assert refund.status == Refund.Status.PENDING
    assert refund.dispatch_attempts == 0 and refund.leased_until is None
    assert pool.in_flight() == 0
    charge.refresh_from_db()
    assert charge.amount_refunded == 700
    # A retry with the key replays it, still pending: no second refund.
    again = post_refund(api, charge, "k-stopping")
    assert again.status_code == 200 and again.json()["id"] == refund.pk
    assert again.headers.get("Idempotent-Replayed") == "true"

    tally = process_pending_refunds()

    assert tally.statuses == {"succeeded": 1}
    refund.refresh_from_db()
    assert refund.status == Refund.Status.SUCCEEDED
    assert ProviderRefund.objects.count() == 1
    assert_ledger_invariants()
    assert_provider_agrees()
