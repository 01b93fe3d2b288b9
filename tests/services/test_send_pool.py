"""Inline dispatch with a wait budget (dispatch/pool.py), with real threads on PostgreSQL.

The caller waits for the provider at most REFUND_INLINE_WAIT_SECONDS: a provider that
answers in time gives it the settled refund; a slow one leaves it `pending` while the
process's send pool finishes; a full pool leaves the refund to the worker. Whoever ends up
sending, the guarded send decides, so there is one provider refund per ledger refund.
"""

from __future__ import annotations

import time

import pytest

from ledger_app.models import Refund
from ledger_app.provider.dispatch import pool, process_pending_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LATENCY_MS = 700  # the slow provider; the budget below is far shorter


@pytest.fixture
def budget(settings):
    settings.REFUND_DISPATCH = "inline"
    settings.REFUND_INLINE_WAIT_SECONDS = 0.1
    settings.SIMULATED_GATEWAY_LATENCY_MS = LATENCY_MS
    yield settings
    wait_for_pool()


def wait_for_pool(limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while pool.in_flight() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.in_flight() == 0, "the send pool did not finish"


def slow_charge(amount: int = 5_000):
    return ChargeFactory(amount=amount, metadata={"simulate_refund": "slow"})


def test_slow_provider_answers_pending_and_the_pool_settles_it(budget):
    charge = slow_charge()

    refund = create_refund(
        RefundRequest(charge_id=charge.id, amount=1_200, idempotency_key="k-slow")
    ).item

    assert refund.status == Refund.Status.PENDING
    stored = Refund.objects.get(pk=refund.pk)
    # The pool's thread holds it: lease taken and attempt recorded, answer not back yet.
    assert stored.status == Refund.Status.PENDING
    assert stored.dispatch_attempts == 1 and stored.leased_until is not None
    assert not ProviderRefund.objects.exists()
    charge.refresh_from_db()
    assert charge.amount_refunded == 1_200  # reserved before anyone waited

    wait_for_pool()
    stored.refresh_from_db()
    assert stored.status == Refund.Status.SUCCEEDED
    assert list(ProviderRefund.objects.values_list("idempotency_key", flat=True)) == [
        stored.provider_idempotency_key
    ]
    # The same key again replays the refund as it now stands; nothing is sent again.
    again = create_refund(
        RefundRequest(charge_id=charge.id, amount=1_200, idempotency_key="k-slow")
    )
    assert again.replayed and again.item.status == Refund.Status.SUCCEEDED
    assert ProviderRefund.objects.count() == 1
    assert_ledger_invariants()
    assert_provider_agrees()


def test_provider_within_budget_answers_settled(budget):
    budget.REFUND_INLINE_WAIT_SECONDS = 5
    charge = ChargeFactory(amount=5_000, metadata={"simulate_refund": "decline"})

    refund = create_refund(RefundRequest(charge_id=charge.id, amount=500)).item

    assert refund.status == Refund.Status.FAILED  # the provider's answer, not pending
    charge.refresh_from_db()
    assert charge.amount_refunded == 0  # released by the decline
    assert_ledger_invariants()


def test_full_pool_leaves_refunds_to_the_worker(budget):
    budget.REFUND_SEND_THREADS = 1
    room = 1 + pool.BACKLOG_PER_THREAD  # one sending, the rest queued
    charge = slow_charge(amount=100_000)

    refunds = [
        create_refund(RefundRequest(charge_id=charge.id, amount=100)).item for _ in range(room + 2)
    ]

    assert all(r.status == Refund.Status.PENDING for r in refunds)
    left = Refund.objects.filter(pk__in=[r.pk for r in refunds[room:]])
    # Nothing took them: no lease, no attempt; they wait for process_refunds.
    assert [(r.dispatch_attempts, r.leased_until) for r in left] == [(0, None), (0, None)]

    tally = process_pending_refunds()  # the worker, racing the pool for what is queued

    wait_for_pool()
    assert sum(tally.statuses.values()) >= 2  # at least the two nobody had taken
    assert set(Refund.objects.values_list("status", flat=True)) == {Refund.Status.SUCCEEDED}
    assert ProviderRefund.objects.count() == room + 2
    charge.refresh_from_db()
    assert charge.amount_refunded == 100 * (room + 2)
    assert_ledger_invariants()
    assert_provider_agrees()


def test_worker_never_sends_what_the_pool_is_sending(budget):
    charge = slow_charge()
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=300)).item
    assert refund.status == Refund.Status.PENDING

    tally = process_pending_refunds()  # while the pool's thread waits on the provider

    assert sum(tally.statuses.values()) == 0  # busy: the pool's thread holds the lease
    wait_for_pool()
    assert Refund.objects.get(pk=refund.pk).status == Refund.Status.SUCCEEDED
    assert ProviderRefund.objects.count() == 1
    assert_provider_agrees()


def test_zero_budget_waits_in_the_callers_thread(budget):
    budget.REFUND_INLINE_WAIT_SECONDS = 0
    charge = slow_charge()

    refund = create_refund(RefundRequest(charge_id=charge.id, amount=300)).item

    assert refund.status == Refund.Status.SUCCEEDED
    assert pool.in_flight() == 0


def test_admin_refund_on_a_slow_provider_says_pending_and_settles(budget, client, admin_user):
    """The agent's refund form, as submitted: the page comes back before the provider
    answers, says the amount is reserved, and the refund settles without anyone."""
    from django.contrib.messages import get_messages

    from tests.admin.refund_form_pages import submit
    from tests.second_factor import verified

    charge = slow_charge()

    response = submit(verified(client, admin_user), charge, amount="12.34")

    assert response.status_code == 302
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert "$12.34: pending: the amount is reserved" in message
    assert not ProviderRefund.objects.exists()
    wait_for_pool()
    assert Refund.objects.get().status == Refund.Status.SUCCEEDED
    assert_ledger_invariants()
