"""The crash that refunded twice, end to end on PostgreSQL: the provider applied a refund,
the process that sent it was killed before the ledger heard, its lease ran out. Then each
way back in (the admin's "Retry dispatch" and "Reconcile now" buttons, the worker, the
reconciler) and several of them at once: one provider refund, and the provider's request
log shows a lookup before anything else, never a second send."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from http.cookies import SimpleCookie

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import reverse

from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.provider.dispatch import send_refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import kill_at, run_command, start_command
from tests.second_factor import verified

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("worker_dispatch"),
]

QUEUE = "admin:ledger_app_refundattention_changelist"


@pytest.fixture
def agent(django_user_model):
    """Staff with the refund permission (granted directly: the two this test needs)."""
    user = django_user_model.objects.create_user("night-agent", password="x-pass-1234567")
    user.is_staff = True
    user.save()
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_refundattention", "refund_charge"])
    )
    return user


@pytest.fixture
def applied_but_unrecorded(worker_dispatch):  # pending, whichever fixture asks for it first
    """A refund the provider applied while the ledger still says pending: its sender was
    killed right after the provider answered, holding a one-second lease (the test runs it
    out: `lease_ran_out` or `lease_ran_out_for_commands`)."""
    charge = ChargeFactory(amount=4_000, metadata={"simulate_lookup": "slow"})
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=1_500)).item
    kill_at("refund.after_provider_call", "process_refunds", "--once", "--lease-seconds", "1")
    refund.refresh_from_db()
    assert (refund.status, refund.dispatch_attempts) == ("pending", 1)
    assert provider_log(refund) == [("refund", "succeeded")]
    return refund


@pytest.fixture
def lease_ran_out(applied_but_unrecorded, time_machine):
    """For a test that stays in this process: its clock (threads too) moves past the lease."""
    time_machine.move_to(timedelta(seconds=1.1), tick=True)


@pytest.fixture
def lease_ran_out_for_commands(applied_but_unrecorded):
    """For a test that starts commands: they keep the real clock, so it waits for real."""
    time.sleep(1.1)


def provider_log(refund: Refund) -> list[tuple[str, str]]:
    return list(
        ProviderRequest.objects.filter(idempotency_key=refund.provider_idempotency_key)
        .order_by("id")
        .values_list("operation", "outcome")
    )


def assert_one_refund_and_asked_before_any_resend(refund: Refund) -> None:
    refund.refresh_from_db()
    charge = Charge.objects.get(pk=refund.charge_id)
    log = provider_log(refund)
    assert refund.status == "succeeded"
    assert ProviderRefund.objects.filter(charge_reference=charge.pk).count() == 1
    assert [op for op, _ in log].count("refund") == 1, log  # never sent a second time
    assert log[0] == ("refund", "succeeded")
    assert log[1][0] == "refund_lookup", log  # the next request asked first
    assert charge.amount_refunded == 1_500
    assert_ledger_invariants()
    assert_provider_agrees()


def press(client: Client, action: str, refund: Refund):
    return client.post(
        reverse(QUEUE), {"action": action, "_selected_action": [refund.pk]}, follow=True
    )


@pytest.mark.usefixtures("lease_ran_out")
@pytest.mark.parametrize("action", ["retry_dispatch", "reconcile_now"])
def test_an_admin_button_asks_the_provider_and_records_who_pressed_it(
    applied_but_unrecorded, agent, action
):
    refund = applied_but_unrecorded
    client = verified(Client(), agent)

    page = press(client, action, refund)

    assert_one_refund_and_asked_before_any_resend(refund)
    shown = " ".join(str(m) for m in page.context["messages"])
    assert "succeeded (the provider already had it, nothing was sent)" in shown
    settled = LedgerEntry.objects.get(refund=refund, kind="refund_succeeded")
    assert settled.actor == "user:night-agent"
    [logged] = LogEntry.objects.filter(object_id=refund.pk)
    assert logged.user == agent and "the provider already had it" in logged.change_message


@pytest.mark.usefixtures("lease_ran_out_for_commands")
def test_the_worker_asks_the_provider_before_sending_again(applied_but_unrecorded):
    result = run_command("process_refunds", "--once")

    assert result.returncode == 0, result.stderr
    assert_one_refund_and_asked_before_any_resend(applied_but_unrecorded)


@pytest.mark.usefixtures("lease_ran_out_for_commands")
def test_the_reconciler_asks_the_provider_before_sending_again(applied_but_unrecorded):
    result = run_command("reconcile")

    assert result.returncode == 0, result.stderr
    assert_one_refund_and_asked_before_any_resend(applied_but_unrecorded)


@pytest.mark.usefixtures("lease_ran_out_for_commands")
def test_worker_reconciler_and_both_buttons_at_once_make_one_lookup_and_no_resend(
    applied_but_unrecorded, agent, settings
):
    refund = applied_but_unrecorded
    # Lookups take 2.5 s, longer than the processes take to start: without the lease all
    # five would be asking at once.
    settings.SIMULATED_GATEWAY_LATENCY_MS = 2_500
    slow = {"SIMULATED_GATEWAY_LATENCY_MS": "2500"}
    processes = [
        start_command("process_refunds", "--once", **slow),
        # No re-check of refunds that succeeded: that later lookup is read-only and
        # legitimate, but it would race the first settle and blur the count below.
        start_command("reconcile", RECONCILE_RECHECK_HOURS="0", **slow),
        start_command("process_refunds", "--once", **slow),
    ]
    pages = []
    # One person in two tabs: one sign-in and one code, the session shared by both.
    signed_in = verified(Client(), agent)

    def click(action: str) -> None:
        try:
            client = Client()
            client.cookies = SimpleCookie(signed_in.cookies)
            pages.append(press(client, action, refund))
        finally:
            connection.close()

    clickers = [
        threading.Thread(target=click, args=(a,)) for a in ("retry_dispatch", "reconcile_now")
    ]
    for thread in clickers:
        thread.start()
    for thread in clickers:
        thread.join(60)
    for process in processes:
        process.wait(60)

    assert [p.returncode for p in processes] == [0, 0, 0], [
        p.stderr and p.stderr.read() for p in processes
    ]
    assert len(pages) == 2 and all(p.status_code == 200 for p in pages)
    assert_one_refund_and_asked_before_any_resend(refund)
    # The lease let exactly one of the five ask; the others found it held or settled.
    assert [op for op, _ in provider_log(refund)] == ["refund", "refund_lookup"]
    assert Refund.objects.get(pk=refund.pk).dispatch_attempts == 2


@pytest.mark.usefixtures("lease_ran_out")
def test_the_guarded_send_itself_lets_one_caller_in_whoever_calls_it(
    applied_but_unrecorded, settings
):
    """No caller's own filter protects this: four threads call send_refund on the one
    refund at the same moment. The lease admits one; the rest are told it is busy."""
    refund = applied_but_unrecorded
    settings.SIMULATED_GATEWAY_LATENCY_MS = 1_000  # the first one is still asking
    barrier = threading.Barrier(4)
    steps = []

    def send() -> None:
        try:
            barrier.wait(10)
            steps.append(send_refund(refund.pk).step)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(steps) == ["busy", "busy", "busy", "looked_up"]
    assert_one_refund_and_asked_before_any_resend(refund)
    assert [op for op, _ in provider_log(refund)] == ["refund", "refund_lookup"]
