"""create_refund's repeat check (`refuse_repeats_within`): the same charge refunded the
same amount a short while ago by another batch or person is refused, under the charge
lock, writing nothing; a key already bound still replays first."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app import errors
from ledger_app.approvals.services import reject_refund
from ledger_app.models import IdempotencyRecord, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund, preview_refund
from tests.invariants import books

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants", "worker_dispatch"),
    pytest.mark.sqlite_pass,
]
WEEK = timedelta(days=7)


def refund(charge, amount, **extra):
    return create_refund(RefundRequest(charge_id=charge.id, amount=amount, **extra)).item


class TestRepeats:
    def test_same_amount_from_another_batch_is_refused_and_writes_nothing(self, succeeded_charge):
        first = refund(succeeded_charge, 1_500, batch_id="monday", idempotency_key="k-1")
        before = books(succeeded_charge)

        with pytest.raises(errors.RepeatOfEarlier) as refused:
            refund(
                succeeded_charge,
                1_500,
                batch_id="tuesday",
                idempotency_key="k-2",
                refuse_repeats_within=WEEK,
            )

        assert refused.value.code == "repeat_of_earlier"
        assert refused.value.earlier.pk == first.pk
        assert "batch monday" in refused.value.message
        assert first.pk in refused.value.message
        assert books(succeeded_charge) == before
        assert not IdempotencyRecord.objects.filter(key="k-2").exists()  # binds no key

    def test_a_person_refund_of_the_same_amount_is_named_by_who_made_it(self, succeeded_charge):
        refund(succeeded_charge, 700, actor="alice")

        with pytest.raises(errors.RepeatOfEarlier) as refused:
            refund(succeeded_charge, 700, actor="bob", refuse_repeats_within=WEEK)

        assert "by alice" in refused.value.message

    def test_rows_of_the_same_batch_are_not_repeats_of_each_other(self, succeeded_charge):
        refund(succeeded_charge, 1_000, batch_id="monday")

        second = refund(succeeded_charge, 1_000, batch_id="monday", refuse_repeats_within=WEEK)

        assert second.batch_id == "monday"
        assert Refund.objects.filter(charge=succeeded_charge).count() == 2

    def test_another_amount_is_not_a_repeat(self, succeeded_charge):
        refund(succeeded_charge, 1_000, batch_id="monday")

        assert refund(succeeded_charge, 1_001, batch_id="tuesday", refuse_repeats_within=WEEK)

    def test_an_omitted_amount_is_compared_as_what_it_would_refund(self, succeeded_charge):
        refund(succeeded_charge, 5_000, batch_id="monday")  # 5,000 of 10,000 left

        with pytest.raises(errors.RepeatOfEarlier):
            refund(succeeded_charge, None, batch_id="tuesday", refuse_repeats_within=WEEK)

    def test_older_than_the_window_is_not_a_repeat(self, succeeded_charge):
        old = refund(succeeded_charge, 1_000, batch_id="last-month")
        Refund.objects.filter(pk=old.pk).update(created_at=timezone.now() - WEEK - timedelta(1))

        assert refund(succeeded_charge, 1_000, batch_id="today", refuse_repeats_within=WEEK)

    def test_a_canceled_refund_gave_nothing_back_so_is_not_repeated(
        self, succeeded_charge, django_user_model
    ):
        alice = django_user_model.objects.create_user("alice", is_staff=True)
        RefundLimit.objects.create(user=alice, currency="usd", per_refund=500)
        waiting = refund(succeeded_charge, 1_000, actor=alice)
        assert waiting.status == Refund.Status.AWAITING_APPROVAL
        lead = django_user_model.objects.create_user("lead", is_staff=True, is_superuser=True)
        reject_refund(refund_id=waiting.id, approver=lead, note="not ours")

        again = refund(succeeded_charge, 1_000, actor="bob", refuse_repeats_within=WEEK)

        assert again.status == Refund.Status.PENDING

    def test_one_awaiting_approval_is_live_so_is_repeated(
        self, succeeded_charge, django_user_model
    ):
        alice = django_user_model.objects.create_user("alice", is_staff=True)
        RefundLimit.objects.create(user=alice, currency="usd", per_refund=500)
        refund(succeeded_charge, 1_000, actor=alice)

        with pytest.raises(errors.RepeatOfEarlier):
            refund(succeeded_charge, 1_000, actor="bob", refuse_repeats_within=WEEK)

    def test_without_the_check_the_same_amount_is_refunded_again(self, succeeded_charge):
        refund(succeeded_charge, 1_000, batch_id="monday")

        again = refund(succeeded_charge, 1_000, batch_id="tuesday")  # --allow-repeats

        assert again.amount == 1_000

    def test_a_bound_key_replays_before_the_repeat_check(self, succeeded_charge):
        first = create_refund(
            RefundRequest(
                charge_id=succeeded_charge.id, amount=900, idempotency_key="same", batch_id="a"
            )
        ).item

        again = create_refund(
            RefundRequest(
                charge_id=succeeded_charge.id,
                amount=900,
                idempotency_key="same",
                batch_id="b",
                refuse_repeats_within=WEEK,
            )
        )

        assert again.replayed and again.item.pk == first.pk

    def test_the_preview_refuses_the_same_repeat(self, succeeded_charge):
        refund(succeeded_charge, 2_000, batch_id="monday")

        with pytest.raises(errors.RepeatOfEarlier):
            preview_refund(
                RefundRequest(
                    charge_id=succeeded_charge.id,
                    amount=2_000,
                    batch_id="tuesday",
                    refuse_repeats_within=WEEK,
                )
            )
        preview = preview_refund(
            RefundRequest(
                charge_id=succeeded_charge.id,
                amount=2_000,
                batch_id="monday",
                refuse_repeats_within=WEEK,
            )
        )
        assert preview.amount == 2_000

    def test_a_window_that_is_not_positive_is_a_programming_error(self, succeeded_charge):
        with pytest.raises(ValueError, match="refuse_repeats_within"):
            refund(succeeded_charge, 100, refuse_repeats_within=timedelta(0))
