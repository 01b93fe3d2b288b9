"""Killed workers, dropped connections and rival workers on PostgreSQL: whatever happens,
one ledger refund is one provider refund and nothing is over-refunded."""

import signal
import time

import psycopg
import pytest
from django.db import connection

from ledger_app.models import Charge, Refund
from ledger_app.provider.dispatch import process_pending_refunds
from ledger_app.provider.gateways.simulated import SimulatedGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import kill_at, run_command, start_command

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("worker_dispatch"),
]


def refund_requests(refund: Refund) -> list[tuple[str, str]]:
    return list(
        ProviderRequest.objects.filter(
            idempotency_key=refund.provider_idempotency_key, operation="refund"
        )
        .order_by("id")
        .values_list("idempotency_key", "outcome")
    )


def kill_worker_at(point: str, *args: str) -> None:
    """Start process_refunds and SIGKILL it when it reaches `point`."""
    kill_at(point, "process_refunds", "--once", *args)


def provider_calls(refund: Refund) -> list[tuple[str, str, str]]:
    """Every request the provider saw for this refund: (operation, key, outcome)."""
    return list(
        ProviderRequest.objects.filter(idempotency_key=refund.provider_idempotency_key)
        .order_by("id")
        .values_list("operation", "idempotency_key", "outcome")
    )


@pytest.mark.parametrize(
    ("point", "applied_before_restart"),
    [
        ("refund.before_provider_call", False),
        ("refund.after_provider_call", True),  # applied at the provider, not yet in the ledger
        ("refund.settle_locked", True),  # inside the settle transaction, row locked
    ],
)
def test_worker_killed_at_any_step_then_restarted_makes_one_provider_refund(
    point, applied_before_restart
):
    charge = ChargeFactory(amount=5_000)
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_200)).item

    kill_worker_at(point, "--lease-seconds", "1")

    refund.refresh_from_db()
    assert refund.status == "pending"  # the ledger does not know yet; the amount stays reserved
    assert len(refund_requests(refund)) == int(applied_before_restart)
    time.sleep(1.1)  # the dead worker's lease runs out
    rerun = run_command("process_refunds", "--once")
    assert rerun.returncode == 0, rerun.stderr

    refund.refresh_from_db()
    charge.refresh_from_db()
    assert refund.status == "succeeded"
    assert ProviderRefund.objects.filter(charge_reference=charge.id).count() == 1
    calls = provider_calls(refund)
    assert {key for _, key, _ in calls} == {f"refund:{refund.id}"}  # one key, every attempt
    # The second attempt asks first: it sends only what the provider has no record of.
    assert calls[-2 if not applied_before_restart else -1][0] == "refund_lookup"
    assert len(refund_requests(refund)) == 1
    assert charge.amount_refunded == 1_200
    assert_ledger_invariants()
    assert_provider_agrees()


class ConnectionKillingGateway(SimulatedGateway):
    """The incident: the provider answers, then the worker's database connection dies
    before the ledger records the answer. The first `failures` answers about each refund
    (the refund itself, then the lookups of later attempts) end that way."""

    def __init__(self, failures: int):
        self.failures = failures
        self.answers: dict[str, int] = {}

    def refund(self, **kwargs):
        return self._then_kill(kwargs["provider_key"], super().refund(**kwargs))

    def lookup_refund(self, **kwargs):
        return self._then_kill(kwargs["provider_key"], super().lookup_refund(**kwargs))

    def _then_kill(self, key, answer):
        self.answers[key] = self.answers.get(key, 0) + 1
        if self.answers[key] <= self.failures:
            pid = connection.connection.info.backend_pid
            db = connection.settings_dict
            with psycopg.connect(
                host=db["HOST"],
                port=db["PORT"],
                user=db["USER"],
                dbname=db["NAME"],
                autocommit=True,
            ) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        return answer


def test_incident_replayed_provider_applies_then_the_database_connection_dies():
    charges = [ChargeFactory(amount=1_000) for _ in range(10)]
    refunds = [
        create_refund(RefundRequest(charge_id=c.id, amount=amount)).item
        for c in charges
        for amount in (400, 600)
    ]
    gateway = ConnectionKillingGateway(failures=2)

    interruptions = 0
    for _ in range(50):  # the worker loop, as in the incident
        tally = process_pending_refunds(batch_size=5, lease_seconds=0, gateway=gateway)
        interruptions += tally.errors

    assert interruptions == 2 * len(refunds)  # the refund's answer and one lookup's, lost
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    assert ProviderRefund.objects.count() == len(refunds) == 20
    for refund in refunds:
        calls = provider_calls(refund)
        assert [op for op, _, _ in calls] == ["refund", "refund_lookup", "refund_lookup"]
        assert {key for _, key, _ in calls} == {refund.provider_idempotency_key}
    for charge in Charge.objects.all():
        assert charge.amount_refunded == charge.amount == 1_000
    assert_ledger_invariants()
    assert_provider_agrees()


def test_two_workers_over_200_pending_refunds_send_each_refund_once():
    charges = [
        ChargeFactory(amount=10_000, metadata={"simulate_refund": "slow"}) for _ in range(20)
    ]
    for charge in charges:
        for _ in range(10):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))
    env = {"SIMULATED_GATEWAY_LATENCY_MS": "10"}

    workers = [
        start_command("process_refunds", "--once", "--batch-size", "10", **env) for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120) for w in workers]

    assert [w.returncode for w in workers] == [0, 0], outputs
    sent = [sum(" succeeded " in line for line in out.splitlines()) for out, _ in outputs]
    assert sum(sent) == 200
    assert all(n > 0 for n in sent), f"one worker did all the work: {sent}"
    assert Refund.objects.filter(status="succeeded").count() == 200
    per_key = ProviderRequest.objects.filter(operation="refund").values_list(
        "idempotency_key", flat=True
    )
    assert len(per_key) == len(set(per_key)) == 200  # every refund sent exactly once
    assert ProviderRefund.objects.count() == 200
    assert_ledger_invariants()
    assert_provider_agrees()


def test_process_refunds_loop_stops_cleanly_on_sigterm():
    charge = ChargeFactory(amount=1_000)
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
    worker = start_command("process_refunds", "--loop", "--poll-seconds", "0.2")
    try:
        deadline = time.monotonic() + 30
        while Refund.objects.get(pk=refund.pk).status != "succeeded":
            assert time.monotonic() < deadline, "the worker never sent the refund"
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=15)
    finally:
        if worker.poll() is None:
            worker.kill()

    assert worker.returncode == 0, err
    assert "SIGTERM" in err
    assert "process_refunds: 1 succeeded" in out
