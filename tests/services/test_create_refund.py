"""create_refund: one test per money rule, each asserting what the database holds afterwards."""

from decimal import Decimal

import pytest

from ledger_app import errors
from ledger_app.models import Charge, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund, preview_refund
from tests.factories import ChargeFactory
from tests.invariants import books

# These tests are about the reservation; the refunds stay pending (worker mode) so what
# they assert is what create_refund's own transaction wrote. Dispatch has its own tests.
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants", "worker_dispatch"),
    pytest.mark.sqlite_pass,
]


class TestRemainingBalance:
    def test_second_refund_cannot_exceed_what_is_left(self, succeeded_charge):
        create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=6_000))
        before = books(succeeded_charge)

        with pytest.raises(errors.AmountTooLarge) as refused:
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=6_000))

        assert refused.value.code == "amount_too_large"
        assert refused.value.param == "amount"
        assert "($40.00)" in refused.value.message  # says what is left, as money
        assert books(succeeded_charge) == before
        assert succeeded_charge.amount_refunded == 6_000

    def test_refund_of_exactly_what_is_left_is_allowed(self, succeeded_charge):
        create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=6_000))

        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=4_000)).item

        succeeded_charge.refresh_from_db()
        assert refund.amount == 4_000
        assert succeeded_charge.amount_refunded == 10_000
        assert succeeded_charge.refunded is True
        assert succeeded_charge.amount_refundable == 0

    def test_one_more_than_what_is_left_is_refused(self, succeeded_charge):
        create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=6_000))
        before = books(succeeded_charge)

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=4_001))

        assert books(succeeded_charge) == before

    def test_amount_above_the_charge_is_refused(self, succeeded_charge):
        before = books(succeeded_charge)

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=10_001))

        assert books(succeeded_charge) == before


class TestOmittedAmount:
    def test_omitted_amount_refunds_the_rest(self, succeeded_charge):
        create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=4_000))

        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id)).item

        succeeded_charge.refresh_from_db()
        assert refund.amount == 6_000
        assert Refund.objects.get(pk=refund.pk).amount == 6_000
        assert succeeded_charge.amount_refunded == 10_000

    def test_omitted_amount_on_fully_refunded_charge_is_refused(self, fully_refunded_charge):
        before = books(fully_refunded_charge)

        with pytest.raises(errors.ChargeAlreadyRefunded) as refused:
            create_refund(RefundRequest(charge_id=fully_refunded_charge.id))

        assert refused.value.code == "charge_already_refunded"
        assert books(fully_refunded_charge) == before
        assert not Refund.objects.filter(amount=0).exists()

    def test_explicit_amount_on_fully_refunded_charge_is_refused_as_already_refunded(
        self, fully_refunded_charge
    ):
        before = books(fully_refunded_charge)

        with pytest.raises(errors.ChargeAlreadyRefunded):
            create_refund(RefundRequest(charge_id=fully_refunded_charge.id, amount=1))

        assert books(fully_refunded_charge) == before


class TestInvalidAmounts:
    @pytest.mark.parametrize(
        "amount",
        [
            0,
            -1,
            -10_000,
            1.0,
            5.5,
            float("nan"),
            float("inf"),
            True,
            False,
            "500",
            "5.5",
            Decimal("500"),
            Decimal("5.5"),
            2**63,
            2**64,
            [500],
            {"amount": 500},
        ],
        ids=repr,
    )
    def test_amount_that_is_not_a_positive_int_is_refused(self, succeeded_charge, amount):
        before = books(succeeded_charge)

        with pytest.raises(errors.InvalidAmount) as refused:
            create_refund(
                RefundRequest(charge_id=succeeded_charge.id, amount=amount, idempotency_key="k-1")
            )

        assert refused.value.code == "invalid_amount"
        assert refused.value.param == "amount"
        assert books(succeeded_charge) == before

    def test_largest_bigint_amount_is_valid_but_above_what_is_left(self, succeeded_charge):
        before = books(succeeded_charge)

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=2**63 - 1))

        assert books(succeeded_charge) == before


class TestRefusalsWriteNothing:
    def test_refused_request_binds_no_key_so_corrected_retry_does_the_work(self, succeeded_charge):
        with pytest.raises(errors.AmountTooLarge):
            create_refund(
                RefundRequest(charge_id=succeeded_charge.id, amount=20_000, idempotency_key="k-fix")
            )
        assert not IdempotencyRecord.objects.filter(key="k-fix").exists()

        result = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=2_000, idempotency_key="k-fix")
        )
        refund = result.item

        assert result.replayed is False
        assert refund.amount == 2_000
        assert IdempotencyRecord.objects.get(key="k-fix").refund_id == refund.id
        succeeded_charge.refresh_from_db()
        assert succeeded_charge.amount_refunded == 2_000

    def test_missing_charge_is_refused_with_resource_missing(self, db):
        with pytest.raises(errors.ResourceMissing) as refused:
            create_refund(
                RefundRequest(charge_id="ch_doesnotexist", amount=100, idempotency_key="k-missing")
            )

        assert refused.value.code == "resource_missing"
        assert Refund.objects.count() == 0
        assert LedgerEntry.objects.count() == 0
        assert IdempotencyRecord.objects.count() == 0

    @pytest.mark.parametrize("charge_id", ["", None, 42, "x" * 65, "ch_\x00", "ch_\ud800"])
    def test_malformed_charge_id_is_refused_as_missing(self, db, charge_id):
        with pytest.raises(errors.ResourceMissing):
            create_refund(RefundRequest(charge_id=charge_id, amount=100))

        assert Refund.objects.count() == 0

    @pytest.mark.parametrize("status", ["pending", "failed", "unknown"])
    def test_charge_that_has_not_succeeded_is_not_refundable(self, db, status):
        charge = ChargeFactory(status=status)
        before = books(charge)

        with pytest.raises(errors.ChargeNotRefundable) as refused:
            create_refund(
                RefundRequest(charge_id=charge.id, amount=100, idempotency_key="k-pending")
            )

        assert refused.value.code == "charge_not_refundable"
        assert books(charge) == before

    @pytest.mark.parametrize("reason", ["other", "DUPLICATE", 3, ["duplicate"]])
    def test_unknown_reason_is_refused(self, succeeded_charge, reason):
        before = books(succeeded_charge)

        with pytest.raises(errors.InvalidReason) as refused:
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100, reason=reason))

        assert refused.value.code == "invalid_reason"
        assert books(succeeded_charge) == before

    @pytest.mark.parametrize(
        "metadata",
        [
            ["a"],
            {"k": 1},
            {1: "v"},
            {"": "v"},
            {"k" * 41: "v"},
            {"k": "v" * 501},
            {f"k{i}": "v" for i in range(51)},
            {"k": "nul\x00"},
            {"k": "\ud800"},
        ],
        ids=repr,
    )
    def test_malformed_metadata_is_refused(self, succeeded_charge, metadata):
        before = books(succeeded_charge)

        with pytest.raises(errors.InvalidMetadata):
            create_refund(
                RefundRequest(charge_id=succeeded_charge.id, amount=100, metadata=metadata)
            )

        assert books(succeeded_charge) == before

    @pytest.mark.parametrize("note", [5, "n" * 1001, "nul\x00byte"], ids=repr)
    def test_malformed_note_is_refused(self, succeeded_charge, note):
        before = books(succeeded_charge)

        with pytest.raises(errors.InvalidNote):
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100, note=note))

        assert books(succeeded_charge) == before


class TestIdempotencyKeys:
    def test_same_key_same_request_replays_and_writes_nothing(self, succeeded_charge):
        first = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=3_000, idempotency_key="k-1")
        ).item
        before = books(succeeded_charge)

        again = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=3_000, idempotency_key="k-1")
        )

        assert again.replayed is True
        assert again.item.id == first.id
        assert again.item.amount == 3_000
        assert books(succeeded_charge) == before
        assert succeeded_charge.amount_refunded == 3_000

    def test_key_is_read_before_the_balance(self, succeeded_charge):
        first = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, idempotency_key="k-all")
        ).item
        before = books(succeeded_charge)
        assert before[0] == 10_000  # nothing left, so a balance-first check would refuse

        again = create_refund(RefundRequest(charge_id=succeeded_charge.id, idempotency_key="k-all"))

        assert again.replayed is True
        assert again.item.id == first.id
        assert books(succeeded_charge) == before

    def test_key_is_read_before_the_charge_status(self, succeeded_charge):
        first = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=500, idempotency_key="k-st")
        ).item
        Charge.objects.filter(pk=succeeded_charge.pk).update(status=Charge.Status.UNKNOWN)

        again = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=500, idempotency_key="k-st")
        ).item

        assert again.id == first.id
        assert Refund.objects.count() == 1

    @pytest.mark.parametrize(
        "changed",
        [
            {"amount": 2_999},
            {"amount": None},  # omitted is not the same request as an explicit amount
            {"reason": "duplicate"},
            {"metadata": {"order": "A-18"}},
            {"note": "another note"},
        ],
        ids=repr,
    )
    def test_same_key_different_request_is_refused_as_reuse(self, succeeded_charge, changed):
        original = {
            "charge_id": succeeded_charge.id,
            "amount": 3_000,
            "reason": "requested_by_customer",
            "metadata": {"order": "A-17"},
            "note": "customer called",
        }
        create_refund(RefundRequest(**original, idempotency_key="k-1"))
        before = books(succeeded_charge)

        with pytest.raises(errors.IdempotencyKeyReused) as refused:
            create_refund(RefundRequest(**(original | changed), idempotency_key="k-1"))

        assert refused.value.code == "idempotency_key_reused"
        assert books(succeeded_charge) == before

    def test_explicit_amount_equal_to_the_rest_is_not_a_retry_of_an_omitted_amount(
        self, succeeded_charge
    ):
        create_refund(RefundRequest(charge_id=succeeded_charge.id, idempotency_key="k-rest"))
        before = books(succeeded_charge)

        with pytest.raises(errors.IdempotencyKeyReused):
            create_refund(
                RefundRequest(
                    charge_id=succeeded_charge.id, amount=10_000, idempotency_key="k-rest"
                )
            )

        assert books(succeeded_charge) == before

    def test_keys_belong_to_the_ledger_not_to_a_charge(self, succeeded_charge):
        other_charge = ChargeFactory(amount=5_000)
        create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=1_000, idempotency_key="k-shared")
        )
        before = books(other_charge)

        with pytest.raises(errors.IdempotencyKeyReused):
            create_refund(
                RefundRequest(charge_id=other_charge.id, amount=1_000, idempotency_key="k-shared")
            )

        assert books(other_charge) == before
        assert other_charge.amount_refunded == 0

    def test_no_key_means_no_deduplication(self, succeeded_charge):
        first = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=2_000)).item
        second = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=2_000)).item

        succeeded_charge.refresh_from_db()
        assert first.id != second.id
        assert succeeded_charge.amount_refunded == 4_000
        assert IdempotencyRecord.objects.count() == 0

    def test_different_keys_with_the_same_amount_are_two_refunds(self, succeeded_charge):
        first = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=2_000, idempotency_key="k1")
        ).item
        second = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=2_000, idempotency_key="k2")
        )

        succeeded_charge.refresh_from_db()
        assert first.id != second.item.id
        assert second.replayed is False
        assert succeeded_charge.amount_refunded == 4_000
        assert Refund.objects.count() == 2

    @pytest.mark.parametrize(
        "key",
        ["", "k" * 256, "tab\there", "new\nline", "nul\x00", "bell\x07", "\ud800", 17, b"bytes"],
        ids=repr,
    )
    def test_malformed_key_is_refused(self, succeeded_charge, key):
        before = books(succeeded_charge)

        with pytest.raises(errors.InvalidIdempotencyKey) as refused:
            create_refund(
                RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key=key)
            )

        assert refused.value.code == "invalid_idempotency_key"
        assert books(succeeded_charge) == before

    @pytest.mark.parametrize("key", ["k", "k" * 255, "ключ-✓-🔑", "bulk:batch-7:12"])
    def test_well_formed_keys_of_any_script_are_accepted(self, succeeded_charge, key):
        refund = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key=key)
        ).item

        assert IdempotencyRecord.objects.get(key=key).refund_id == refund.id


class TestCreatedRefund:
    def test_refund_currency_comes_from_the_charge(self, db):
        charge = ChargeFactory(amount=1_500, currency="JPY")

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=500)).item

        assert charge.currency == "jpy"
        assert Refund.objects.get(pk=refund.pk).currency == "jpy"
        assert LedgerEntry.objects.get(refund=refund).currency == "jpy"

    def test_new_refund_is_pending_and_counts_in_amount_refunded(
        self, succeeded_charge, admin_user
    ):
        refund = create_refund(
            RefundRequest(
                charge_id=succeeded_charge.id,
                amount=1_234,
                reason="duplicate",
                metadata={"order": "A-17"},
                note="double charge",
                actor=admin_user,
                source=Refund.Source.ADMIN,
            )
        ).item

        stored = Refund.objects.get(pk=refund.pk)
        succeeded_charge.refresh_from_db()
        assert stored.status == Refund.Status.PENDING
        assert (stored.amount, stored.reason, stored.metadata, stored.note) == (
            1_234,
            "duplicate",
            {"order": "A-17"},
            "double charge",
        )
        assert (stored.source, stored.created_by, stored.actor) == (
            "admin",
            admin_user,
            "user:admin",
        )
        assert succeeded_charge.amount_refunded == 1_234
        assert succeeded_charge.amount_refundable == 10_000 - 1_234
        assert succeeded_charge.refunded is False

    def test_refund_ids_are_random_and_not_sequential(self, succeeded_charge):
        ids = [
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=1)).item.id
            for _ in range(40)
        ]

        assert all(i.startswith("re_") and len(i) == 27 and i[3:].isalnum() for i in ids)
        # Sequential or time-based ids share leading characters; random ones almost never
        # share six (odds about 1 in 70 million for 40 ids).
        assert len({i[3:9] for i in ids}) == 40

    @pytest.mark.parametrize("actor", [5, object(), "nul\x00"], ids=["int", "object", "nul"])
    def test_an_actor_that_is_neither_a_user_nor_a_label_is_a_programming_error(
        self, succeeded_charge, actor
    ):
        with pytest.raises(TypeError):
            create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=1, actor=actor))

        assert Refund.objects.count() == 0

    def test_provider_key_is_minted_once_from_the_refund_id(self, succeeded_charge):
        refund = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k-p")
        ).item

        replay = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=100, idempotency_key="k-p")
        ).item

        assert refund.provider_idempotency_key == f"refund:{refund.id}"
        assert replay.provider_idempotency_key == refund.provider_idempotency_key
        assert Refund.objects.get().provider_idempotency_key == f"refund:{refund.id}"

    def test_ledger_entry_is_appended_with_the_refund(self, succeeded_charge):
        refund = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, amount=700, actor="cli:ops")
        ).item

        entry = LedgerEntry.objects.get(refund=refund)
        assert (entry.kind, entry.amount, entry.refunded_delta, entry.charge_id, entry.actor) == (
            "refund_reserved",
            700,
            700,
            succeeded_charge.id,
            "cli:ops",
        )

    def test_key_record_keeps_the_request_as_sent(self, succeeded_charge):
        refund = create_refund(
            RefundRequest(charge_id=succeeded_charge.id, idempotency_key="k-sent")
        ).item

        record = IdempotencyRecord.objects.get(key="k-sent")
        assert record.operation == "refund.create"
        assert record.request_params["amount"] is None  # omitted, not the resolved 10000
        assert record.request_params["charge"] == succeeded_charge.id
        assert len(record.fingerprint) == 64
        assert record.refund_id == refund.id


class TestPreviewDecidesAsCreateWould:
    """preview_refund (bulk runs' --dry-run) finds the charge and refuses a mismatch as
    create_refund does."""

    def test_a_payment_intent_alone_is_previewed_as_its_charge(self):
        charge = ChargeFactory(amount=3_000)

        preview = preview_refund(RefundRequest(payment_intent=charge.payment_intent, amount=1_000))

        assert (preview.charge.pk, preview.amount) == (charge.pk, 1_000)

    def test_a_charge_of_another_payment_intent_is_refused_by_both(self):
        charge, other = ChargeFactory(), ChargeFactory()
        request = RefundRequest(charge_id=charge.pk, payment_intent=other.payment_intent, amount=1)

        with pytest.raises(errors.PaymentIntentMismatch):
            preview_refund(request)
        with pytest.raises(errors.PaymentIntentMismatch):
            create_refund(request)
        assert not Refund.objects.exists()
