"""Dispatch and settle against the simulated provider: what the provider says is what the
ledger records, a timeout is unknown, and one ledger refund is one provider refund."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from ledger_app import errors
from ledger_app.charges.services import create_charge
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.provider.dispatch import (
    Outcome,
    process_pending_refunds,
    reconcile_charges,
    reconcile_refunds,
    send,
    send_refund,
    settle_refund,
)
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderCharge, ProviderRefund, ProviderRequest
from tests.factories import ChargeFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants"),
    pytest.mark.sqlite_pass,
]


def charge_that(behaviour: str, amount: int = 10_000, **more) -> Charge:
    return ChargeFactory(amount=amount, metadata={"simulate_refund": behaviour, **more})


def provider_requests(refund: Refund, operation: str = "refund") -> list[str]:
    return list(
        ProviderRequest.objects.filter(
            idempotency_key=refund.provider_idempotency_key, operation=operation
        ).values_list("outcome", flat=True)
    )


def entries(refund: Refund) -> list[str]:
    return list(LedgerEntry.objects.filter(refund=refund).values_list("kind", flat=True))


def set_behaviour(charge: Charge, behaviour: str) -> None:
    Charge.objects.filter(pk=charge.pk).update(metadata={"simulate_refund": behaviour})


@pytest.mark.usefixtures("inline_dispatch")
class TestInlineDispatch:
    def test_refund_is_sent_at_once_and_succeeds(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=2_500)).item

        stored = Refund.objects.get(pk=refund.pk)
        provider = ProviderRefund.objects.get()
        assert refund.status == stored.status == "succeeded"
        assert provider.idempotency_key == stored.provider_idempotency_key == f"refund:{refund.id}"
        assert provider.amount == 2_500 and provider.charge_reference == succeeded_charge.id
        assert provider.metadata["ledger_refund_id"] == refund.id
        assert stored.provider_refund_id == provider.provider_id
        assert stored.leased_until is None
        assert entries(refund) == ["refund_reserved", "refund_succeeded"]

    def test_an_unexpected_error_after_the_send_answers_the_refund_pending(
        self, succeeded_charge, monkeypatch, caplog
    ):
        # The provider refunds; then recording its answer fails in a way nothing expected.
        def broken(**settling):
            raise ValueError("a bug in the settle")

        monkeypatch.setattr(send, "settle_refund", broken)
        result = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=2_500))

        refund = Refund.objects.get(pk=result.item.pk)
        succeeded_charge.refresh_from_db()
        assert not result.replayed and result.item.status == refund.status == "pending"
        assert succeeded_charge.amount_refunded == 2_500  # reserved, not lost
        assert "dispatch failed, it will be retried" in caplog.text
        monkeypatch.undo()
        refund.leased_until = None  # its lease ran out
        refund.save(update_fields=["leased_until"])
        call_command("process_refunds", "--once", stdout=io.StringIO())
        refund.refresh_from_db()
        assert refund.status == "succeeded"
        assert provider_requests(refund) == ["succeeded"]  # sent once; the worker asked

    def test_replay_does_not_send_again(self, succeeded_charge):
        first = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k")
        ).item

        again = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k")
        )

        assert again.replayed and again.item.id == first.id and again.item.status == "succeeded"
        assert provider_requests(first) == ["succeeded"]

    def test_decline_releases_the_reservation_so_the_amount_can_be_refunded_again(self):
        charge = charge_that("decline", amount=3_000)

        declined = create_refund(RefundRequest(charge_id=charge.id, amount=3_000)).item

        charge.refresh_from_db()
        assert declined.status == "failed"
        assert declined.status_detail == "simulated_decline"
        assert charge.amount_refunded == 0
        assert entries(declined) == ["refund_reserved", "refund_released"]
        set_behaviour(charge, "succeed")
        again = create_refund(RefundRequest(charge_id=charge.id, amount=3_000)).item
        charge.refresh_from_db()
        assert again.status == "succeeded"
        assert charge.amount_refunded == 3_000

    def test_timeout_is_unknown_not_failed_and_keeps_the_amount_reserved(self):
        charge = charge_that("timeout", amount=3_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000)).item

        charge.refresh_from_db()
        assert refund.status == "unknown"
        assert Refund.objects.get(pk=refund.pk).status == "unknown"
        assert charge.amount_refunded == 1_000
        assert charge.amount_refundable == 2_000
        assert entries(refund) == ["refund_reserved"]
        with pytest.raises(errors.AmountTooLarge):  # the reserved amount is not refundable
            create_refund(RefundRequest(charge_id=charge.id, amount=2_001))

    def test_lost_answer_is_unknown_and_the_reconciler_settles_it_to_succeeded(self):
        charge = charge_that("apply_then_timeout")
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item
        assert refund.status == "unknown"

        tally = reconcile_refunds()

        refund.refresh_from_db()
        assert refund.status == "succeeded"
        assert tally.statuses == {"succeeded": 1}
        assert (
            ProviderRefund.objects.filter(idempotency_key=refund.provider_idempotency_key).count()
            == 1
        )
        assert provider_requests(refund) == ["applied_then_timed_out"]  # never sent again
        assert entries(refund) == ["refund_reserved", "refund_succeeded"]

    def test_reconciler_leaves_unknown_what_the_provider_still_cannot_say(self):
        charge = charge_that("timeout")
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item

        tally = reconcile_refunds()

        refund.refresh_from_db()
        assert refund.status == "unknown"
        assert tally.statuses == {"unknown": 1}
        # The provider had no record, so the refund was sent again with the same key.
        assert provider_requests(refund) == ["timed_out", "timed_out"]
        charge.refresh_from_db()
        assert charge.amount_refunded == 700

    def test_reconciler_leaves_unknown_when_lookups_are_unavailable(self):
        charge = charge_that("apply_then_timeout", simulate_lookup="unavailable")
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item

        tally = reconcile_refunds()

        refund.refresh_from_db()
        assert refund.status == "unknown"
        assert tally.statuses == {"unknown": 1}
        assert provider_requests(refund) == ["applied_then_timed_out"]

    def test_reconciler_settles_to_what_the_provider_says_once_it_answers(self):
        charge = charge_that("timeout")
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item
        set_behaviour(charge, "decline")

        reconcile_refunds()

        refund.refresh_from_db()
        charge.refresh_from_db()
        assert refund.status == "failed"
        assert charge.amount_refunded == 0

    def test_slow_provider_within_the_timeout_succeeds(self, settings):
        settings.SIMULATED_GATEWAY_LATENCY_MS = 20
        charge = charge_that("slow")

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item

        assert refund.status == "succeeded"

    def test_slow_provider_past_the_timeout_is_unknown_then_reconciled(self, settings):
        settings.SIMULATED_GATEWAY_LATENCY_MS = 200
        settings.GATEWAY_TIMEOUT_SECONDS = 0.05
        charge = charge_that("slow")

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=700)).item
        assert refund.status == "unknown"
        reconcile_refunds()

        refund.refresh_from_db()
        assert refund.status == "succeeded"
        assert ProviderRefund.objects.count() == 1


@pytest.mark.usefixtures("worker_dispatch")
class TestWorker:
    def test_pending_refunds_wait_for_the_worker_and_are_sent_once(self, succeeded_charge):
        refunds = [
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
            for _ in range(3)
        ]
        assert {r.status for r in refunds} == {"pending"}
        assert ProviderRequest.objects.count() == 0

        first = process_pending_refunds(batch_size=2)
        second = process_pending_refunds(batch_size=2)

        assert first.statuses == {"succeeded": 3}
        assert second.statuses == {}
        assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
        assert all(provider_requests(r) == ["succeeded"] for r in refunds)

    def test_a_leased_refund_is_not_claimed_by_another_worker(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
        Refund.objects.filter(pk=refund.pk).update(
            leased_until=timezone.now() + timedelta(minutes=5)
        )

        tally = process_pending_refunds()

        assert tally.statuses == {}
        assert Refund.objects.get(pk=refund.pk).status == "pending"
        assert provider_requests(refund) == []

    @pytest.mark.django_db(transaction=True)
    def test_a_send_inside_a_transaction_is_refused_before_it_leases(self, succeeded_charge):
        # The lease and the attempt must be committed before the provider is asked; inside
        # a caller's transaction they would not be (its rollback would forget the attempt).
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item

        with pytest.raises(RuntimeError, match="outside any transaction"), transaction.atomic():
            send_refund(refund.id)

        stored = Refund.objects.get(pk=refund.pk)
        assert (stored.status, stored.dispatch_attempts) == ("pending", 0)
        assert stored.leased_until is None
        assert provider_requests(refund) == []

    def test_an_expired_lease_comes_back_to_the_workers(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
        Refund.objects.filter(pk=refund.pk).update(
            leased_until=timezone.now() - timedelta(seconds=1), dispatch_attempts=1
        )

        tally = process_pending_refunds()

        refund.refresh_from_db()
        assert tally.statuses == {"succeeded": 1}
        assert refund.dispatch_attempts == 2

    def test_reconciler_resends_a_stale_pending_refund_with_its_key(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
        Refund.objects.filter(pk=refund.pk).update(
            leased_until=timezone.now() - timedelta(seconds=1)
        )

        tally = reconcile_refunds()

        refund.refresh_from_db()
        assert tally.statuses == {"succeeded": 1}
        assert provider_requests(refund) == ["succeeded"]

    def test_reconciler_leaves_pending_refunds_that_nobody_has_claimed_to_the_worker(
        self, succeeded_charge
    ):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item

        tally = reconcile_refunds()

        assert tally.statuses == {}
        assert Refund.objects.get(pk=refund.pk).status == "pending"

    def test_process_refunds_command_logs_each_refund_and_a_summary(self, succeeded_charge, capsys):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item
        declined = create_refund(
            RefundRequest(charge_id=charge_that("decline").id, amount=100)
        ).item

        call_command("process_refunds", "--once", "--batch-size", "1")

        out = capsys.readouterr().out
        assert f"{refund.id} succeeded 100 usd" in out
        assert f"{declined.id} failed (simulated_decline)" in out
        assert "process_refunds: 1 failed, 1 succeeded" in out

    def test_reconcile_command_prints_what_it_settled(self, capsys):
        refund = create_refund(
            RefundRequest(charge_id=charge_that("apply_then_timeout").id, amount=100)
        ).item
        process_pending_refunds()
        assert Refund.objects.get(pk=refund.pk).status == "unknown"

        call_command("reconcile")

        out = capsys.readouterr().out
        assert f"refund {refund.id} succeeded" in out
        assert "reconcile: refunds: 1 succeeded; charges: nothing to do" in out


class TestSettle:
    @pytest.mark.parametrize("final", ["succeeded", "failed"])
    @pytest.mark.parametrize("answer", ["succeeded", "failed", "unknown"])
    def test_states_never_move_out_of_a_final_state(self, worker_dispatch, final, answer):
        charge = ChargeFactory(amount=1_000)
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=400)).item
        settle_refund(refund_id=refund.id, outcome=Outcome(final, "p1", "first"))
        charge.refresh_from_db()
        before = (charge.amount_refunded, LedgerEntry.objects.count())

        settled = settle_refund(refund_id=refund.id, outcome=Outcome(answer, "p2", "second"))

        charge.refresh_from_db()
        assert settled.status == final
        assert Refund.objects.get(pk=refund.pk).provider_refund_id == "p1"
        assert (charge.amount_refunded, LedgerEntry.objects.count()) == before

    def test_unknown_moves_to_succeeded_or_failed_only(self, worker_dispatch, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=400)).item
        settle_refund(refund_id=refund.id, outcome=Outcome("unknown", detail="timeout"))

        settle_refund(refund_id=refund.id, outcome=Outcome("unknown", detail="again"))
        settled = settle_refund(refund_id=refund.id, outcome=Outcome("failed", "p", "no"))

        succeeded_charge.refresh_from_db()
        assert settled.status == "failed"
        assert succeeded_charge.amount_refunded == 0
        assert entries(refund) == ["refund_reserved", "refund_released"]

    def test_dispatch_of_a_settled_refund_sends_nothing(self, inline_dispatch, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=400)).item

        again = send_refund(refund.id).item

        assert again.status == "succeeded"
        assert provider_requests(refund) == ["succeeded"]


def run_scenario(mode: str) -> list[tuple[int, list[tuple[int, str]], list[tuple[int, str]]]]:
    """The same refunds in one dispatch mode; returns, per charge, what the ledger and the
    provider hold afterwards (without ids, so two runs compare)."""
    plan = [("succeed", [300, 200]), ("decline", [500]), ("apply_then_timeout", [400])]
    charges = []
    for behaviour, amounts in plan:
        charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": behaviour})
        charges.append(charge)
        for amount in amounts:
            create_refund(
                RefundRequest(
                    charge_id=charge.id,
                    amount=amount,
                    idempotency_key=f"{mode}:{charge.id}:{amount}",
                )
            )
    process_pending_refunds()
    reconcile_refunds()
    state = []
    for charge in charges:
        charge.refresh_from_db()
        ledger = sorted(charge.refunds.values_list("amount", "status"))
        provider = sorted(
            ProviderRefund.objects.filter(charge_reference=charge.id).values_list(
                "amount", "status"
            )
        )
        state.append((charge.amount_refunded, ledger, provider))
    return state


def test_inline_and_worker_modes_reach_the_same_end_state(settings):
    settings.REFUND_DISPATCH = "inline"
    inline = run_scenario("inline")
    settings.REFUND_DISPATCH = "worker"
    worker = run_scenario("worker")

    assert inline == worker
    assert inline == [
        (500, [(200, "succeeded"), (300, "succeeded")], [(200, "succeeded"), (300, "succeeded")]),
        (0, [(500, "failed")], [(500, "declined")]),
        (400, [(400, "succeeded")], [(400, "succeeded")]),
    ]


class TestCharges:
    def test_create_charge_captures_through_the_gateway(self, db):
        charge = create_charge(amount=1_500, currency="EUR", description="Train pass").item

        provider = ProviderCharge.objects.get()
        assert charge.status == "succeeded"
        assert charge.currency == "eur"
        assert charge.provider_idempotency_key == f"charge:{charge.id}" == provider.idempotency_key
        assert charge.provider_charge_id == provider.provider_id
        assert list(LedgerEntry.objects.filter(charge=charge).values_list("kind", "amount")) == [
            ("charge_succeeded", 1_500)
        ]

    def test_the_charges_actor_is_named_on_its_ledger_entry(self, db):
        charge = create_charge(amount=1_500, currency="usd", actor="api_key:sk_test_ab12").item

        entry = LedgerEntry.objects.get(charge=charge)
        assert (entry.kind, entry.actor) == ("charge_succeeded", "api_key:sk_test_ab12")

    def test_declined_charge_is_failed_and_cannot_be_refunded(self, db):
        charge = create_charge(
            amount=1_500, currency="usd", metadata={"simulate_charge": "decline"}
        ).item

        assert charge.status == "failed"
        assert not LedgerEntry.objects.filter(charge=charge).exists()
        with pytest.raises(errors.ChargeNotRefundable):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))

    def test_charge_timeout_is_unknown_until_reconciled(self, db):
        charge = create_charge(
            amount=1_500, currency="usd", metadata={"simulate_charge": "apply_then_timeout"}
        ).item
        assert charge.status == "unknown"
        with pytest.raises(errors.ChargeNotRefundable):
            create_refund(RefundRequest(charge_id=charge.id, amount=100))

        tally = reconcile_charges()

        charge.refresh_from_db()
        assert tally.statuses == {"succeeded": 1}
        assert charge.status == "succeeded"
        assert ProviderCharge.objects.count() == 1
        assert LedgerEntry.objects.filter(charge=charge, kind="charge_succeeded").count() == 1

    def test_charge_key_replays_and_refuses_another_request(self, db):
        first = create_charge(amount=1_500, currency="usd", idempotency_key="ck").item

        again = create_charge(amount=1_500, currency="usd", idempotency_key="ck")
        with pytest.raises(errors.IdempotencyKeyReused):
            create_charge(amount=1_600, currency="usd", idempotency_key="ck")
        with pytest.raises(errors.IdempotencyKeyReused):  # keys belong to the whole ledger
            create_refund(RefundRequest(charge_id=first.id, amount=100, idempotency_key="ck"))

        assert again.replayed and again.item.id == first.id
        assert Charge.objects.count() == 1
        assert ProviderCharge.objects.count() == 1

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"amount": 0}, errors.InvalidAmount),
            ({"amount": 1.5}, errors.InvalidAmount),
            ({"currency": "xyz"}, errors.InvalidCurrency),
            ({"currency": 7}, errors.InvalidCurrency),
            ({"description": "x\x00"}, errors.InvalidDescription),
            ({"metadata": {"k": 1}}, errors.InvalidMetadata),
            ({"idempotency_key": ""}, errors.InvalidIdempotencyKey),
        ],
        ids=repr,
    )
    def test_bad_charge_requests_are_refused_and_write_nothing(self, db, kwargs, error):
        with pytest.raises(error):
            create_charge(**({"amount": 100, "currency": "usd"} | kwargs))

        assert Charge.objects.count() == 0
        assert ProviderRequest.objects.count() == 0
