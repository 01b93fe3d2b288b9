"""refund, verify_ledger, API key commands, purge_idempotency_keys and import_charges."""

import io
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from ledger_app.access.api_keys import authenticate_api_key, create_api_key
from ledger_app.models import ApiKey, Charge, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def run(name, *args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(name, *map(str, args), stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


class TestRefundCommand:
    def test_prints_the_refund_and_exits_0(self):
        charge = ChargeFactory(amount=5_000)

        code, out, _ = run(
            "refund",
            charge.pk,
            "--amount",
            "1234",
            "--reason",
            "duplicate",
            "--idempotency-key",
            "cli-1",
            "--note",
            "ticket 9",
        )

        refund = Refund.objects.get()
        assert code == 0
        assert out.strip() == f"{refund.id} 1234 usd succeeded"
        assert (refund.source, refund.note, refund.reason) == ("cli", "ticket 9", "duplicate")
        assert refund.actor.startswith("cli")

    def test_same_key_again_replays(self):
        charge = ChargeFactory(amount=5_000)
        run("refund", charge.pk, "--amount", "100", "--idempotency-key", "cli-1")

        code, out, _ = run("refund", charge.pk, "--amount", "100", "--idempotency-key", "cli-1")

        assert code == 0 and out.strip().endswith("(replayed)")
        assert Refund.objects.count() == 1

    @pytest.mark.parametrize(
        ("amount", "code_text"),
        [
            ("12.34", "invalid_amount"),
            ("-1", "invalid_amount"),
            ("0", "invalid_amount"),
            ("99999", "amount_too_large"),
        ],
    )
    def test_refusals_print_the_code_and_exit_1(self, amount, code_text):
        charge = ChargeFactory(amount=5_000)

        code, _, err = run("refund", charge.pk, "--amount", amount)

        assert code == 1 and code_text in err
        assert Refund.objects.count() == 0

    def test_unknown_charge(self):
        code, _, err = run("refund", "ch_nope")

        assert code == 1 and "resource_missing" in err


class TestVerifyLedger:
    def test_clean_books(self):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=100))

        code, out, _ = run("verify_ledger")

        assert code == 0 and "the books agree" in out

    @pytest.mark.allows_drift
    @pytest.mark.parametrize(
        ("sql", "problem"),
        [
            (
                "UPDATE ledger_app_charge SET amount_refunded = amount_refunded + 1 WHERE id = %s",
                "amount_refunded_drift",
            ),
            (
                "UPDATE ledger_app_refund SET status = 'failed' WHERE charge_id = %s",
                "amount_refunded_drift",
            ),
            (
                "UPDATE ledger_app_refund SET currency = 'eur' WHERE charge_id = %s",
                "currency_mismatch",
            ),
            (
                "UPDATE ledger_app_refund SET provider_idempotency_key = 'refund:other' "
                "WHERE charge_id = %s",
                "provider_key_changed",
            ),
            (
                "UPDATE ledger_app_refund SET amount = 99 WHERE charge_id = %s",
                "amount_refunded_drift",
            ),
        ],
        ids=["refunded-bumped", "refund-failed-silently", "currency", "provider-key", "amount"],
    )
    def test_catches_drift_planted_with_raw_sql(self, sql, problem):
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.pk, amount=100, idempotency_key="k"))
        with connection.cursor() as cursor:
            cursor.execute(sql, [charge.pk])

        code, out, err = run("verify_ledger")

        assert code == 1
        assert problem in out and "DRIFT" in out
        assert re.search(r"verify_ledger: (1 drift|(?!1 )\d+ drifts) found", err), err


class TestApiKeyCommands:
    def test_list_shows_prefixes_never_secrets_and_revoke_stops_a_key(self):
        key, secret = create_api_key(name="order-service")

        _, listed, _ = run("list_api_keys")
        code, revoked, _ = run("revoke_api_key", key.prefix)
        _, listed_after, _ = run("list_api_keys")

        assert key.prefix in listed and secret not in listed and "active" in listed
        assert code == 0 and "revoked" in revoked
        assert "revoked" in listed_after
        assert authenticate_api_key(secret) is None

    def test_revoking_an_unknown_prefix_exits_1(self):
        assert run("revoke_api_key", "sk_nothing")[0] == 1
        assert ApiKey.objects.count() == 0


class TestPurgeIdempotencyKeys:
    def test_purges_only_old_keys_of_final_refunds(self, settings):
        charge = ChargeFactory(amount=5_000)
        old_final = create_refund(
            RefundRequest(charge_id=charge.pk, amount=100, idempotency_key="old-final")
        ).item
        settings.REFUND_DISPATCH = "worker"
        old_pending = create_refund(
            RefundRequest(charge_id=charge.pk, amount=100, idempotency_key="old-pending")
        ).item
        timed_out = ChargeFactory(amount=5_000, metadata={"simulate_refund": "timeout"})
        settings.REFUND_DISPATCH = "inline"
        old_unknown = create_refund(
            RefundRequest(charge_id=timed_out.pk, amount=100, idempotency_key="old-unk")
        ).item
        create_refund(RefundRequest(charge_id=charge.pk, amount=100, idempotency_key="new-final"))
        IdempotencyRecord.objects.exclude(key="new-final").update(
            created_at=timezone.now() - timedelta(days=40)
        )
        assert (old_final.status, old_pending.status, old_unknown.status) == (
            "succeeded",
            "pending",
            "unknown",
        )

        _, dry, _ = run("purge_idempotency_keys", "--older-than", "30", "--dry-run")
        assert "1 key would be deleted" in dry and IdempotencyRecord.objects.count() == 4
        code, out, _ = run("purge_idempotency_keys", "--older-than", "30")

        assert code == 0 and "1 key deleted" in out
        assert set(IdempotencyRecord.objects.values_list("key", flat=True)) == {
            "old-pending",
            "old-unk",
            "new-final",
        }
        assert Refund.objects.count() == 4  # keys go, refunds and their ledger stay

    def test_zero_days_is_refused(self):
        assert run("purge_idempotency_keys", "--older-than", "0")[0] == 2


class TestImportCharges:
    def write(self, tmp_path, text):
        path = tmp_path / "charges.csv"
        path.write_text(text, encoding="utf-8")
        return path

    def test_imports_then_rerun_changes_nothing(self, tmp_path):
        path = self.write(
            tmp_path,
            (
                "id,amount,currency,status,description,created\n"
                "ch_ext1,1234,USD,succeeded,Lamp,1700000000\n"
                "ch_ext2,500,jpy,failed,,2024-01-02T03:04:05Z\n"
            ),
        )

        first = run("import_charges", path)
        again = run("import_charges", path)

        assert first[0] == 0 and "2 charges imported" in first[1]
        assert again[0] == 0 and "2 charges exist" in again[1]
        lamp = Charge.objects.get(pk="ch_ext1")
        assert (lamp.amount, lamp.currency, lamp.status) == (1_234, "usd", "succeeded")
        assert lamp.created_at.timestamp() == 1_700_000_000
        assert LedgerEntry.objects.filter(charge=lamp, kind="charge_succeeded").count() == 1
        assert not LedgerEntry.objects.filter(charge_id="ch_ext2").exists()

    def test_refuses_rows_that_would_change_a_charge(self, tmp_path):
        run(
            "import_charges",
            self.write(tmp_path, "id,amount,currency,status\nch_e,100,usd,succeeded\n"),
        )

        code, out, err = run(
            "import_charges",
            self.write(
                tmp_path,
                (
                    "id,amount,currency,status\n"
                    "ch_e,200,usd,succeeded\n"
                    "ch_e,100,eur,succeeded\n"
                    "ch_f,0,usd,succeeded\n"
                    "ch_g,100,qqq,succeeded\n"
                    "ch_h,100,usd,captured\n"
                ),
            ),
        )

        assert code == 1
        assert "import_conflict" in err and "invalid_amount" in err
        assert "invalid_currency" in err and "invalid_charge_status" in err
        assert Charge.objects.get(pk="ch_e").amount == 100
        assert Charge.objects.count() == 1

    @pytest.mark.parametrize(
        "content",
        [
            b"",
            b"id,amount\nch_a,100\n",
            b"id,amount,currency,status\nch_\xe9,1,usd,failed\n",
            b"id,amount,currency,status\n",
        ],
        ids=["empty", "missing-columns", "latin-1", "no-rows"],
    )
    def test_unusable_files_exit_2_and_write_nothing(self, tmp_path, content):
        path = tmp_path / "bad.csv"
        path.write_bytes(content)

        code, _, err = run("import_charges", path)

        assert code == 2 and "unusable file" in err
        assert Charge.objects.count() == 0
