"""import_charges in its own layout (amounts in minor units): one rule for the wrong units
with bulk_refund (the whole file is unusable), unknown columns ignored, a refund made at
the provider before import recorded as a final refund that is never sent, re-runs that
change nothing, a dry run that writes nothing, and the summary and exit codes."""

import io

import pytest
from django.core.management import CommandError, call_command

from ledger_app import errors
from ledger_app.models import Charge, Event, LedgerEntry, Refund
from ledger_app.provider.gateways.simulated import SimulatedGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.invariants import rows_written
from tests.processes import run_command

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def import_file(path, *args: str) -> tuple[int, str, str]:
    """The command's exit code (CommandError.returncode, else 0), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_charges", str(path), *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


def csv_file(tmp_path, text: str, name: str = "charges.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_import_refuses_dates_the_database_cannot_read_back(tmp_path):
    path = csv_file(
        tmp_path,
        "id,amount,currency,status,created\n"
        "ch_old,100,usd,succeeded,0001-01-01T00:00:00+01:00\n"
        "ch_far,100,usd,succeeded,9999-12-31T23:59:59-01:00\n",
    )

    code, _, err = import_file(path)

    assert code == 1
    assert "line 2: refused, invalid_created" in err and "line 3: refused, invalid_created" in err
    assert Charge.objects.count() == 0


class TestWrongUnitsMakeTheWholeFileUnusable:
    """As bulk_refund: a decimal point in a minor-units column means the file is in the
    wrong units, so no row of it is trusted."""

    @pytest.mark.parametrize(
        ("rows", "said"),
        [
            ("ch_b,12.50,usd,succeeded,\n", "line 3: amount '12.50' is not a whole number"),
            ("ch_b,1250,usd,succeeded,3.00\n", "line 3: amount_refunded '3.00' is not a whole"),
            ('ch_b,"1,250",usd,succeeded,\n', "line 3: amount '1,250' is not a whole number"),
        ],
        ids=["amount", "amount_refunded", "thousands-separator"],
    )
    def test_exits_2_and_writes_nothing_not_even_the_good_rows(self, tmp_path, rows, said):
        path = csv_file(
            tmp_path, "id,amount,currency,status,amount_refunded\nch_a,1000,usd,succeeded,\n" + rows
        )
        before = rows_written()

        code, out, err = import_file(path)

        assert code == 2
        assert said in err and "minor units" in err and "nothing was written" in err
        assert out == ""
        assert rows_written() == before

    def test_a_stripe_export_without_format_stripe_is_told_to_use_it(self, tmp_path):
        path = csv_file(
            tmp_path,
            "id,Amount,Amount Refunded,Currency,Status\nch_s,12.50,0.00,usd,Paid\n",
        )

        code, _, err = import_file(path)

        assert code == 2
        assert "add --format stripe" in err
        assert Charge.objects.count() == 0


class TestColumns:
    def test_unknown_columns_are_ignored_and_named_once_in_the_summary(self, tmp_path):
        path = csv_file(
            tmp_path,
            "id,amount,currency,Fee,status,notes\n"
            "ch_a,1000,usd,30,succeeded,first\n"
            "ch_b,2000,eur,60,succeeded,second\n",
        )

        code, out, _ = import_file(path)

        assert code == 0
        assert out.strip() == (
            "import_charges: 2 rows: 2 charges imported; ignored columns: Fee, notes"
        )
        assert sorted(Charge.objects.values_list("id", "amount", "currency")) == [
            ("ch_a", 1_000, "usd"),
            ("ch_b", 2_000, "eur"),
        ]

    @pytest.mark.parametrize(
        "header",
        ["id,amount,currency\n", "id,amount,currency,status,amount\n"],
        ids=["status-missing", "amount-twice"],
    )
    def test_a_required_column_missing_or_twice_is_unusable(self, tmp_path, header):
        path = csv_file(tmp_path, header + "ch_a,1000,usd,succeeded,1000\n")

        code, _, err = import_file(path)

        assert code == 2 and "the header must name the columns" in err
        assert Charge.objects.count() == 0


class TestRefundedBeforeImport:
    HEADER = "id,amount,currency,status,amount_refunded\n"

    def test_a_partly_refunded_charge_comes_in_with_a_final_refund_and_its_ledger(self, tmp_path):
        path = csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n")

        code, out, _ = import_file(path)

        assert code == 0
        assert "1 charge imported (1 with a refund made at the provider)" in out
        charge = Charge.objects.get(pk="ch_part")
        assert (charge.amount_refunded, charge.amount_refundable) == (1_200, 3_800)
        refund = Refund.objects.get(charge=charge)
        assert (refund.amount, refund.currency, refund.status) == (1_200, "usd", "succeeded")
        assert (refund.source, refund.actor) == ("import", "import_charges")
        assert "before this charge was imported" in refund.note
        assert refund.provider_idempotency_key == f"refund:{refund.pk}"
        assert refund.dispatch_attempts == 0
        assert list(
            LedgerEntry.objects.filter(charge=charge).values_list(
                "kind", "amount", "refunded_delta", "actor"
            )
        ) == [
            ("charge_succeeded", 5_000, 0, "import_charges"),
            ("refund_reserved", 1_200, 1_200, "import_charges"),
            ("refund_succeeded", 1_200, 0, "import_charges"),
        ]
        assert sorted(Event.objects.filter(charge=charge).values_list("type", flat=True)) == [
            "charge.refunded",
            "charge.succeeded",
            "refund.created",
        ]

    def test_only_the_remainder_can_be_refunded_afterwards(self, tmp_path):
        import_file(csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n"))

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id="ch_part", amount=3_801))
        rest = create_refund(RefundRequest(charge_id="ch_part")).item

        assert rest.amount == 3_800
        charge = Charge.objects.get(pk="ch_part")
        assert charge.amount_refunded == charge.amount == 5_000
        with pytest.raises(errors.ChargeAlreadyRefunded):
            create_refund(RefundRequest(charge_id="ch_part", amount=1))

    def test_a_fully_refunded_charge_has_nothing_left(self, tmp_path):
        import_file(csv_file(tmp_path, self.HEADER + "ch_full,700,usd,succeeded,700\n"))

        charge = Charge.objects.get(pk="ch_full")

        assert charge.refunded and charge.amount_refundable == 0
        with pytest.raises(errors.ChargeAlreadyRefunded):
            create_refund(RefundRequest(charge_id="ch_full", amount=1))

    def test_the_worker_and_the_reconciler_never_send_it(self, tmp_path, settings, monkeypatch):
        """A final status is never dispatched: the worker sends the refund made here after
        the import (so it ran) and never the one the provider made before it; the
        reconciler's re-check of recent successes asks about the later one only."""
        settings.REFUND_DISPATCH = "worker"
        asked: list[str] = []
        lookup = SimulatedGateway.lookup_refund

        def lookup_refund(gateway, **kwargs):
            asked.append(kwargs["ledger_refund_id"])
            return lookup(gateway, **kwargs)

        monkeypatch.setattr(SimulatedGateway, "lookup_refund", lookup_refund)
        import_file(csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n"))
        imported = Refund.objects.get()
        # A refund made here afterwards: pending, for the worker, which proves it ran.
        later = create_refund(RefundRequest(charge_id="ch_part", amount=800)).item

        call_command("process_refunds", "--once", stdout=io.StringIO(), stderr=io.StringIO())
        call_command("reconcile", stdout=io.StringIO(), stderr=io.StringIO())

        assert asked == [later.pk]  # re-checked: the one sent; never the imported one
        sends = ProviderRequest.objects.filter(operation="refund")
        assert list(sends.values_list("idempotency_key", flat=True)) == [
            later.provider_idempotency_key
        ]
        imported.refresh_from_db()
        assert (imported.status, imported.dispatch_attempts) == ("succeeded", 0)
        assert Refund.objects.get(pk=later.pk).status == "succeeded"
        assert Charge.objects.get(pk="ch_part").amount_refunded == 2_000

    @pytest.mark.parametrize(
        ("row", "said"),
        [
            ("ch_x,1000,usd,succeeded,1001\n", "amount_refunded (1001) is more than"),
            ("ch_x,1000,usd,failed,500\n", "A failed charge cannot have been refunded"),
        ],
        ids=["more-than-the-amount", "on-a-failed-charge"],
    )
    def test_an_impossible_amount_refunded_refuses_its_row_only(self, tmp_path, row, said):
        path = csv_file(tmp_path, self.HEADER + "ch_ok,1000,usd,succeeded,0\n" + row)

        code, out, err = import_file(path)

        assert code == 1
        assert "line 3: refused, invalid_amount: " + said in err
        assert "import_charges: 2 rows: 1 charge imported, 1 row refused (invalid_amount)" in out
        assert list(Charge.objects.values_list("id", flat=True)) == ["ch_ok"]
        assert not Refund.objects.exists()  # 0 refunded: no refund row

    def test_the_whole_row_is_one_transaction(self, tmp_path, monkeypatch):
        """A failure while writing the refund leaves no charge behind either."""
        from ledger_app.charges import imports

        def broken(charge, amount):
            raise RuntimeError("disk full")

        monkeypatch.setattr(imports, "_record_refunded_before", broken)
        before = rows_written()

        with pytest.raises(RuntimeError):
            import_file(csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n"))

        assert rows_written() == before


class TestRunningAgain:
    HEADER = "id,amount,currency,status,amount_refunded\n"

    def test_the_same_file_again_changes_nothing(self, tmp_path):
        path = csv_file(
            tmp_path,
            self.HEADER + "ch_part,5000,usd,succeeded,1200\nch_none,300,usd,succeeded,\n",
        )
        assert import_file(path)[0] == 0
        before = rows_written()

        code, out, _ = import_file(path)

        assert code == 0
        assert out.strip() == "import_charges: 2 rows: 2 charges exist"
        assert rows_written() == before
        assert Charge.objects.get(pk="ch_part").amount_refunded == 1_200

    def test_another_amount_refunded_for_an_existing_charge_is_a_conflict(self, tmp_path):
        import_file(csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n"))
        before = rows_written()

        code, out, err = import_file(
            csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,2000\n", "later.csv")
        )

        assert code == 1
        assert "1 row refused (import_conflict)" in out
        assert "was imported with 1200 refunded at the provider" in err
        assert "the file says 2000" in err
        assert rows_written() == before
        assert Charge.objects.get(pk="ch_part").amount_refunded == 1_200

    def test_refunds_made_here_later_do_not_make_the_file_a_conflict(self, tmp_path):
        """What the file says is compared with what the import recorded, not with the
        charge's balance, which moves with every refund made here."""
        path = csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n")
        import_file(path)
        create_refund(RefundRequest(charge_id="ch_part", amount=300))

        code, out, _ = import_file(path)

        assert code == 0 and "1 charge exists" in out
        assert Charge.objects.get(pk="ch_part").amount_refunded == 1_500

    def test_a_file_that_does_not_say_is_not_a_conflict(self, tmp_path):
        import_file(csv_file(tmp_path, self.HEADER + "ch_part,5000,usd,succeeded,1200\n"))

        code, out, _ = import_file(
            csv_file(tmp_path, "id,amount,currency,status\nch_part,5000,usd,succeeded\n", "b.csv")
        )

        assert code == 0 and "1 charge exists" in out


class TestDryRun:
    def test_writes_nothing_and_says_what_it_would_do(self, tmp_path):
        import_file(csv_file(tmp_path, "id,amount,currency,status\nch_old,100,usd,succeeded\n"))
        path = csv_file(
            tmp_path,
            "id,amount,currency,status,amount_refunded\n"
            "ch_old,100,usd,succeeded,\n"
            "ch_new,5000,usd,succeeded,1200\n"
            "ch_new2,900,jpy,succeeded,0\n"
            "ch_bad,100,qqq,succeeded,\n",
            "dry.csv",
        )
        before = rows_written()

        code, out, err = import_file(path, "--dry-run")

        assert rows_written() == before
        assert code == 1
        assert out.strip() == (
            "import_charges (dry run, nothing written): 4 rows: would import 2 charges "
            "(1 with a refund made at the provider), would skip 1 existing charge, "
            "1 row refused (invalid_currency)"
        )
        assert "line 5: refused, invalid_currency" in err

    def test_decides_as_the_real_run_would(self, tmp_path):
        """A charge twice in one file: the second row finds the first, in a dry run too."""
        path = csv_file(
            tmp_path,
            "id,amount,currency,status\n"
            "ch_a,100,usd,succeeded\n"
            "ch_a,100,usd,succeeded\n"
            "ch_a,200,usd,succeeded\n",
        )

        dry = import_file(path, "--dry-run")
        real = import_file(path)

        assert dry[1].strip() == (
            "import_charges (dry run, nothing written): 3 rows: would import 1 charge, "
            "would skip 1 existing charge, 1 row refused (import_conflict)"
        )
        assert real[1].strip() == (
            "import_charges: 3 rows: 1 charge imported, 1 charge exists, "
            "1 row refused (import_conflict)"
        )
        assert (dry[0], real[0]) == (1, 1)


class TestSummary:
    def test_counts_are_written_with_their_nouns(self, tmp_path):
        path = csv_file(tmp_path, "id,amount,currency,status\nch_a,100,usd,succeeded\n")

        first = import_file(path)
        again = import_file(path)

        assert first[1].strip() == "import_charges: 1 row: 1 charge imported"
        assert again[1].strip() == "import_charges: 1 row: 1 charge exists"

    def test_refusals_are_counted_per_code(self, tmp_path):
        path = csv_file(
            tmp_path,
            "id,amount,currency,status\n"
            "ch_a,0,usd,succeeded\n"
            "ch_b,100,qqq,succeeded\n"
            "ch_c,100,usd,captured\n"
            "ch_d,100,usd,canceled\n",
        )

        code, out, err = import_file(path)

        assert code == 1
        assert out.strip() == (
            "import_charges: 4 rows: 4 rows refused (invalid_amount 1, invalid_charge_status 2, "
            "invalid_currency 1)"
        )
        assert err.rstrip().endswith("4 rows were refused")


@pytest.mark.django_db(transaction=True)
class TestExitCodesOfTheProcess:
    """manage.py import_charges as a real process: 0 imported, 1 rows refused, 2 unusable."""

    def test_exit_codes(self, tmp_path):
        good = csv_file(tmp_path, "id,amount,currency,status\nch_p1,100,usd,succeeded\n", "g.csv")
        refused = csv_file(
            tmp_path,
            "id,amount,currency,status\nch_p2,100,usd,succeeded\nch_p3,1,zzz,failed\n",
            "r.csv",
        )
        unusable = csv_file(
            tmp_path,
            "id,amount,currency,status\nch_p4,100,usd,succeeded\nch_p5,1.50,usd,succeeded\n",
            "u.csv",
        )

        done = [run_command("import_charges", str(path)) for path in (good, refused, unusable)]

        assert [d.returncode for d in done] == [0, 1, 2], [d.stderr for d in done]
        assert "unusable file" in done[2].stderr and "Traceback" not in done[2].stderr
        assert sorted(Charge.objects.values_list("id", flat=True)) == ["ch_p1", "ch_p2"]
