"""Concurrent refunds on real connections: the invariants hold whatever the interleaving."""

import random
import threading
import time

import pytest
from django.db import transaction

from ledger_app import errors
from ledger_app.idempotency import services as idempotency
from ledger_app.idempotency.services import Created
from ledger_app.models import Charge, IdempotencyRecord, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.concurrency import run_at_once
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants

THREADS = 16


def refund_call(**kwargs):
    return lambda: create_refund(RefundRequest(**kwargs)).item


def split(results):
    refunds = [r for r in results if isinstance(r, Refund)]
    refused = [r for r in results if isinstance(r, Exception)]
    return refunds, refused


@pytest.mark.django_db(transaction=True)
def test_a_refund_never_commits_inside_someone_elses_transaction(succeeded_charge):
    with pytest.raises(RuntimeError), transaction.atomic():
        create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100))

    assert Refund.objects.count() == 0


@pytest.mark.django_db(transaction=True)
class TestConcurrentRefunds:
    def test_sixteen_refunds_of_60_on_a_charge_of_100_make_exactly_one(self):
        """Runs on SQLite (file database, IMMEDIATE) and on PostgreSQL (row lock)."""
        charge = ChargeFactory(amount=100)

        results = run_at_once([refund_call(charge_id=charge.id, amount=60)] * THREADS)

        refunds, refused = split(results)
        assert len(refunds) == 1, results
        assert len(refused) == THREADS - 1
        assert all(isinstance(e, errors.AmountTooLarge) for e in refused), refused
        charge.refresh_from_db()
        assert charge.amount_refunded == 60
        assert Refund.objects.filter(charge=charge).count() == 1
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_sixteen_random_amounts_never_refund_more_than_the_charge(self):
        charge = ChargeFactory(amount=1_000)
        rng = random.Random(20261130)
        amounts = [rng.randint(1, 200) for _ in range(THREADS)]

        results = run_at_once([refund_call(charge_id=charge.id, amount=a) for a in amounts])

        refunds, refused = split(results)
        assert all(
            isinstance(e, errors.AmountTooLarge | errors.ChargeAlreadyRefunded) for e in refused
        ), refused
        charge.refresh_from_db()
        stored = sum(Refund.objects.filter(charge=charge).values_list("amount", flat=True))
        assert stored == sum(r.amount for r in refunds) == charge.amount_refunded
        assert charge.amount_refunded <= charge.amount
        assert len(refunds) >= 1
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_sixteen_omitted_amounts_refund_the_charge_once(self):
        charge = ChargeFactory(amount=5_000)

        results = run_at_once([refund_call(charge_id=charge.id)] * THREADS)

        refunds, refused = split(results)
        assert len(refunds) == 1
        assert refunds[0].amount == 5_000
        assert all(isinstance(e, errors.ChargeAlreadyRefunded) for e in refused), refused
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_sixteen_requests_with_one_key_make_one_refund_and_all_get_it(self):
        charge = ChargeFactory(amount=10_000)

        results = run_at_once(
            [
                lambda: create_refund(
                    RefundRequest(charge_id=charge.id, amount=2_500, idempotency_key="k-same")
                )
            ]
            * THREADS
        )

        assert all(isinstance(r, Created) for r in results), results
        assert len({r.item.id for r in results}) == 1
        assert sum(not r.replayed for r in results) == 1
        charge.refresh_from_db()
        assert charge.amount_refunded == 2_500
        assert Refund.objects.count() == 1
        assert IdempotencyRecord.objects.get(key="k-same").refund_id == results[0].item.id
        assert_ledger_invariants()

    @pytest.mark.postgres
    @pytest.mark.parametrize("amount", [None, 4_000], ids=["omitted", "whole charge"])
    def test_sixteen_requests_with_one_key_for_the_whole_charge_replay_not_refuse(self, amount):
        """The waiting requests must read the key, not the now-empty balance."""
        charge = ChargeFactory(amount=4_000)

        results = run_at_once(
            [refund_call(charge_id=charge.id, amount=amount, idempotency_key="k-all")] * THREADS
        )

        assert all(isinstance(r, Refund) for r in results), results
        assert len({r.id for r in results}) == 1
        charge.refresh_from_db()
        assert charge.amount_refunded == 4_000
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_one_key_sent_for_two_charges_at_once_makes_one_refund(self):
        first, second = ChargeFactory(amount=3_000), ChargeFactory(amount=3_000)

        results = run_at_once(
            [
                refund_call(charge_id=first.id, amount=1_000, idempotency_key="k-two"),
                refund_call(charge_id=second.id, amount=1_000, idempotency_key="k-two"),
            ]
        )

        refunds, refused = split(results)
        assert len(refunds) == 1, results
        assert len(refused) == 1 and isinstance(refused[0], errors.IdempotencyKeyReused)
        assert Refund.objects.count() == 1
        winner = Charge.objects.get(pk=refunds[0].charge_id)
        loser = Charge.objects.get(pk=(second if winner.pk == first.pk else first).pk)
        assert (winner.amount_refunded, loser.amount_refunded) == (1_000, 0)
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_a_refused_key_holder_lets_the_waiting_request_with_that_key_proceed(self, monkeypatch):
        """The first request takes the key, is refused and rolls back; the second, which
        waited on the key, then does the work instead of replaying a refusal."""
        charge = ChargeFactory(amount=1_000)
        holding = threading.Event()
        real_claim = idempotency.claim

        def claim_then_dawdle(request, *, new_id):
            holder = real_claim(request, new_id=new_id)
            if request.params["amount"] == 5_000:
                holding.set()
                time.sleep(0.5)  # the second request reaches the key and waits on it
            return holder

        monkeypatch.setattr(idempotency, "claim", claim_then_dawdle)

        def second():
            assert holding.wait(10)
            return create_refund(
                RefundRequest(charge_id=charge.id, amount=400, idempotency_key="k-fix")
            )

        results = run_at_once(
            [refund_call(charge_id=charge.id, amount=5_000, idempotency_key="k-fix"), second]
        )

        assert isinstance(results[0], errors.AmountTooLarge), results
        assert isinstance(results[1], Created) and results[1].replayed is False, results
        assert IdempotencyRecord.objects.get(key="k-fix").refund_id == results[1].item.id
        charge.refresh_from_db()
        assert charge.amount_refunded == 400
        assert_ledger_invariants()

    @pytest.mark.postgres
    def test_keyed_and_keyless_requests_mixed_on_one_charge_keep_the_books(self):
        charge = ChargeFactory(amount=2_000)
        calls = []
        for n in range(THREADS):
            key = f"k-{n % 4}" if n % 2 == 0 else None  # keys k-0 and k-2, each sent 4 times
            calls.append(refund_call(charge_id=charge.id, amount=300, idempotency_key=key))

        results = run_at_once(calls)

        refunds, refused = split(results)
        assert all(isinstance(e, errors.AmountTooLarge) for e in refused), refused
        charge.refresh_from_db()
        assert charge.amount_refunded == 300 * Refund.objects.filter(charge=charge).count()
        assert charge.amount_refunded <= 2_000
        keyed_ids = set()
        for key in ("k-0", "k-2"):
            got = {
                r.id
                for n, r in enumerate(results)
                if isinstance(r, Refund) and n % 2 == 0 and f"k-{n % 4}" == key
            }
            record = IdempotencyRecord.objects.filter(key=key).first()
            assert got == ({record.refund_id} if record else set()), key
            keyed_ids |= got
        keyless = sum(isinstance(r, Refund) for n, r in enumerate(results) if n % 2 == 1)
        assert Refund.objects.filter(charge=charge).count() == len(keyed_ids) + keyless
        assert_ledger_invariants()
