"""Database constraints hold even when code bypasses the services."""

import pytest
from django.db import IntegrityError, InternalError, connection, transaction
from django.db.models import F

from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def refused_by_database(action) -> bool:
    try:
        with transaction.atomic():
            action()
    except (IntegrityError, InternalError):
        return True
    return False


class TestChargeConstraints:
    def test_database_refuses_amount_refunded_above_amount(self, succeeded_charge):
        assert refused_by_database(
            lambda: Charge.objects.filter(pk=succeeded_charge.pk).update(
                amount_refunded=F("amount") + 1
            )
        )
        succeeded_charge.refresh_from_db()
        assert succeeded_charge.amount_refunded == 0

    def test_database_refuses_negative_amount_refunded(self, succeeded_charge):
        assert refused_by_database(
            lambda: Charge.objects.filter(pk=succeeded_charge.pk).update(amount_refunded=-1)
        )

    @pytest.mark.parametrize("amount", [0, -5])
    def test_database_refuses_charge_amount_that_is_not_positive(self, db, amount):
        assert refused_by_database(
            lambda: Charge.objects.create(amount=amount, currency="usd", status="succeeded")
        )
        assert Charge.objects.count() == 0

    def test_refunded_and_amount_refundable_are_derived(self, succeeded_charge):
        succeeded_charge.amount_refunded = 2_500

        assert succeeded_charge.amount_refundable == 7_500
        assert succeeded_charge.refunded is False
        succeeded_charge.amount_refunded = 10_000
        assert succeeded_charge.refunded is True
        assert "refunded" not in {f.name for f in Charge._meta.fields}

    def test_charge_ids_are_random_with_a_prefix(self, db):
        ids = {ChargeFactory().id for _ in range(3)}

        assert len(ids) == 3
        assert all(i.startswith("ch_") and i[3:].isalnum() and len(i) == 27 for i in ids)


class TestRefundConstraints:
    @pytest.mark.parametrize("amount", [0, -1])
    def test_database_refuses_refund_amount_that_is_not_positive(self, succeeded_charge, amount):
        assert refused_by_database(
            lambda: Refund.objects.create(
                charge=succeeded_charge,
                amount=amount,
                currency="usd",
                source="system",
                provider_idempotency_key="refund:x",
            )
        )

    def test_database_refuses_a_second_refund_with_the_same_provider_key(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item

        assert refused_by_database(
            lambda: Refund.objects.create(
                charge=succeeded_charge,
                amount=100,
                currency="usd",
                source="system",
                provider_idempotency_key=refund.provider_idempotency_key,
            )
        )


class TestLedgerIsAppendOnly:
    def test_entries_cannot_be_updated_or_deleted_through_the_orm(self, succeeded_charge):
        entry = LedgerEntry.objects.get(charge=succeeded_charge)

        with pytest.raises(TypeError):
            LedgerEntry.objects.filter(pk=entry.pk).update(amount=1)
        with pytest.raises(TypeError):
            LedgerEntry.objects.filter(pk=entry.pk).delete()
        with pytest.raises(TypeError):
            entry.save()
        with pytest.raises(TypeError):
            entry.delete()
        assert LedgerEntry.objects.get(pk=entry.pk).amount == succeeded_charge.amount

    @pytest.mark.postgres
    def test_database_refuses_update_and_delete_of_entries(self, succeeded_charge):
        entry = LedgerEntry.objects.get(charge=succeeded_charge)

        def raw(sql):
            with connection.cursor() as cursor:
                cursor.execute(sql, [entry.pk])

        assert refused_by_database(
            lambda: raw("UPDATE ledger_app_ledgerentry SET memo = 'x' WHERE id = %s")
        )
        assert refused_by_database(lambda: raw("DELETE FROM ledger_app_ledgerentry WHERE id = %s"))
        assert LedgerEntry.objects.filter(pk=entry.pk, memo="").exists()

    def test_database_refuses_an_entry_whose_delta_does_not_match_its_kind(self, succeeded_charge):
        refund = create_refund(RefundRequest(charge_id=succeeded_charge.id, amount=100)).item

        assert refused_by_database(
            lambda: LedgerEntry.objects.create(
                charge=succeeded_charge,
                refund=refund,
                kind=LedgerEntry.Kind.REFUND_RESERVED,
                amount=100,
                refunded_delta=0,
                currency="usd",
            )
        )
