"""import_charges --format stripe: Stripe's dashboard payments export (Payments > Export),
amounts in major units converted exactly by each currency's exponent, Stripe's statuses
mapped to ours, refunds made at Stripe before the import brought in as final refunds."""

import csv
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ledger_app import errors
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests.invariants import rows_written

pytestmark = pytest.mark.django_db

# The export's columns as Stripe names them, most of which the import does not use.
COLUMNS = [
    "id",
    "Description",
    "Seller Message",
    "Created date (UTC)",
    "Amount",
    "Amount Refunded",
    "Currency",
    "Converted Amount",
    "Converted Amount Refunded",
    "Fee",
    "Taxes On Fee",
    "Converted Currency",
    "Mode",
    "Status",
    "Statement Descriptor",
    "Customer ID",
    "Customer Email",
    "Captured",
    "Card Last4",
    "PaymentIntent ID",
    "order_id (metadata)",
]
UNUSED = [
    "Seller Message",
    "Converted Amount",
    "Converted Amount Refunded",
    "Fee",
    "Taxes On Fee",
    "Converted Currency",
    "Mode",
    "Statement Descriptor",
]
SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "samples" / "stripe-payments.csv"


def payment(charge_id: str, amount: str, refunded: str, currency: str, status: str, **more):
    """One row of the export, with what Stripe writes in the other columns."""
    return {
        "id": charge_id,
        "Description": f"Order {charge_id[-4:]}",
        "Seller Message": "Payment complete.",
        "Created date (UTC)": "2024-01-31 12:34:56",
        "Amount": amount,
        "Amount Refunded": refunded,
        "Currency": currency,
        "Converted Amount": amount,
        "Converted Amount Refunded": refunded,
        "Fee": "0.59",
        "Taxes On Fee": "0.00",
        "Converted Currency": "usd",
        "Mode": "Live",
        "Status": status,
        "Statement Descriptor": "EXAMPLE SHOP",
        "Customer ID": f"cus_{charge_id[-6:]}",
        "Customer Email": "someone@example.com",
        "Captured": "false" if status == "Failed" else "true",
        "Card Last4": "4242",
        "PaymentIntent ID": f"pi_{charge_id[-6:]}",
        "order_id (metadata)": charge_id[-4:],
        **more,
    }


def export(tmp_path, rows, name="unified_payments.csv", columns=COLUMNS) -> Path:
    path = tmp_path / name
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def import_stripe(path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(
            "import_charges", str(path), "--format", "stripe", *args, stdout=out, stderr=err
        )
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


PAYMENTS = [
    payment("ch_usdPartly0001", "1,250.00", "300.00", "usd", "Paid"),
    payment("ch_usdRefunded02", "45.00", "45.00", "usd", "Refunded"),
    payment("ch_usdFailed0003", "20.00", "0.00", "usd", "Failed", **{"Converted Amount": ""}),
    payment("ch_jpyPaid000004", "5,000", "0", "jpy", "Paid"),
    payment("ch_kwdPartly0005", "12.345", "1.500", "kwd", "Paid"),
]


class TestImportingAnExport:
    def test_each_charge_keeps_its_payment_intent_and_its_refund_shows_it(self, tmp_path):
        rows = [*PAYMENTS[:2], payment("ch_noIntent000006", "9.00", "0.00", "usd", "Paid")]
        rows[-1]["PaymentIntent ID"] = ""  # a charge made without one
        code, _, err = import_stripe(export(tmp_path, rows))

        assert code == 0, err
        intents = dict(Charge.objects.values_list("id", "payment_intent"))
        assert intents == {
            "ch_usdPartly0001": "pi_ly0001",
            "ch_usdRefunded02": "pi_nded02",
            "ch_noIntent000006": "",
        }
        refunded_before = Refund.objects.get(charge_id="ch_usdRefunded02")
        assert refunded_before.payment_intent == "pi_nded02"

    @pytest.mark.parametrize("cell", ["pi_", "ch_123", "pi_bad id", "pi_\x00", "x" * 300])
    def test_a_payment_intent_that_is_not_one_refuses_its_row(self, tmp_path, cell):
        rows = [PAYMENTS[3], payment("ch_badIntent00007", "9.00", "0.00", "usd", "Paid")]
        rows[-1]["PaymentIntent ID"] = cell.replace("\\x00", "\x00")

        code, _, err = import_stripe(export(tmp_path, rows))

        assert code == 1
        assert "line 3: refused, invalid_payment_intent: PaymentIntent ID" in err
        assert list(Charge.objects.values_list("id", flat=True)) == ["ch_jpyPaid000004"]

    def test_amounts_statuses_and_refunds_come_in_exactly(self, tmp_path):
        path = export(tmp_path, PAYMENTS)

        code, out, err = import_stripe(path)

        assert code == 0, err
        assert out.strip() == (
            "import_charges: 5 rows: 5 charges imported (3 with a refund made at the "
            f"provider); ignored columns: {', '.join(UNUSED)}"
        )
        charges = {
            c.id: (c.amount, c.currency, c.status, c.amount_refunded) for c in Charge.objects.all()
        }
        assert charges == {
            "ch_usdPartly0001": (125_000, "usd", "succeeded", 30_000),
            "ch_usdRefunded02": (4_500, "usd", "succeeded", 4_500),
            "ch_usdFailed0003": (2_000, "usd", "failed", 0),
            "ch_jpyPaid000004": (5_000, "jpy", "succeeded", 0),
            "ch_kwdPartly0005": (12_345, "kwd", "succeeded", 1_500),
        }
        refunds = Refund.objects.values_list("charge_id", "amount", "status", "source", "actor")
        assert sorted(refunds) == [
            ("ch_kwdPartly0005", 1_500, "succeeded", "import", "import_charges"),
            ("ch_usdPartly0001", 30_000, "succeeded", "import", "import_charges"),
            ("ch_usdRefunded02", 4_500, "succeeded", "import", "import_charges"),
        ]

    def test_customer_description_created_and_metadata_are_kept(self, tmp_path):
        import_stripe(export(tmp_path, PAYMENTS[:1]))

        charge = Charge.objects.get()

        assert charge.customer == "cus_ly0001"
        assert charge.description == "Order 0001"
        assert charge.created_at == datetime(2024, 1, 31, 12, 34, 56, tzinfo=UTC)
        assert charge.metadata == {"order_id": "0001"}

    def test_the_older_created_header_is_read_too(self, tmp_path):
        columns = [("Created (UTC)" if c == "Created date (UTC)" else c) for c in COLUMNS]
        row = payment("ch_olderHeader01", "10.00", "0.00", "usd", "Paid")
        row["Created (UTC)"] = "2019-05-06 07:08"

        code, _, err = import_stripe(export(tmp_path, [row], columns=columns))

        assert code == 0, err
        assert Charge.objects.get().created_at == datetime(2019, 5, 6, 7, 8, tzinfo=UTC)

    def test_only_the_remainder_can_be_refunded(self, tmp_path):
        import_stripe(export(tmp_path, PAYMENTS))

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id="ch_kwdPartly0005", amount=10_846))
        with pytest.raises(errors.ChargeAlreadyRefunded):
            create_refund(RefundRequest(charge_id="ch_usdRefunded02", amount=1))
        with pytest.raises(errors.ChargeNotRefundable):
            create_refund(RefundRequest(charge_id="ch_usdFailed0003", amount=1))
        rest = create_refund(RefundRequest(charge_id="ch_kwdPartly0005")).item

        assert rest.amount == 10_845  # 12.345 - 1.500 KWD
        assert Charge.objects.get(pk="ch_kwdPartly0005").refunded

    def test_nothing_imported_is_sent_to_the_provider(self, tmp_path, settings):
        settings.REFUND_DISPATCH = "worker"
        import_stripe(export(tmp_path, PAYMENTS))

        call_command("process_refunds", "--once", stdout=io.StringIO(), stderr=io.StringIO())

        assert not ProviderRequest.objects.filter(operation__in=["refund", "charge"]).exists()
        assert set(Refund.objects.values_list("status", "dispatch_attempts")) == {("succeeded", 0)}

    def test_the_sample_in_the_docs_imports(self, tmp_path):
        code, out, err = import_stripe(SAMPLE)

        assert code == 0, err
        assert "5 rows: 5 charges imported (3 with a refund made at the provider)" in out
        assert LedgerEntry.objects.filter(kind="refund_succeeded").count() == 3


class TestRows:
    @pytest.mark.parametrize(
        ("row", "code", "said"),
        [
            (
                payment("ch_usdTooFine001", "12.345", "0.00", "usd", "Paid"),
                "invalid_amount",
                "Amount: USD amounts have at most 2 decimal places; '12.345' has more.",
            ),
            (
                payment("ch_jpyTooFine001", "1,000.5", "0", "jpy", "Paid"),
                "invalid_amount",
                "Amount: JPY amounts have no decimal places",
            ),
            (
                payment("ch_kwdTooFine001", "1.000", "0.0005", "kwd", "Paid"),
                "invalid_amount",
                "Amount Refunded: KWD amounts have at most 3 decimal places",
            ),
            (
                payment("ch_moreRefunded1", "10.00", "10.01", "usd", "Paid"),
                "invalid_amount",
                "amount_refunded (1001) is more than the charge's amount (1000)",
            ),
            (
                payment("ch_halfRefunded1", "10.00", "5.00", "usd", "Refunded"),
                "invalid_amount",
                "Stripe status Refunded means refunded in full",
            ),
            (
                payment("ch_negative00001", "-10.00", "0.00", "usd", "Paid"),
                "invalid_amount",
                "is not an amount",
            ),
            (
                payment("ch_pending000001", "10.00", "0.00", "usd", "Pending"),
                "invalid_charge_status",
                "Stripe status 'Pending' is not one a charge is imported with",
            ),
            (
                payment("ch_uncaptured001", "10.00", "0.00", "usd", "Paid", Captured="false"),
                "invalid_charge_status",
                "not captured: an authorization, not a charge",
            ),
        ],
        ids=[
            "usd-3-decimals",
            "jpy-decimals",
            "kwd-4-decimals-refunded",
            "refunded-above-amount",
            "refunded-status-not-in-full",
            "negative",
            "pending",
            "uncaptured",
        ],
    )
    def test_a_bad_row_is_refused_alone(self, tmp_path, row, code, said):
        good = payment("ch_goodRow000001", "10.00", "0.00", "usd", "Paid")

        exit_code, out, err = import_stripe(export(tmp_path, [good, row]))

        assert exit_code == 1
        assert f"line 3: refused, {code}: " in err and said in err
        assert f"2 rows: 1 charge imported, 1 row refused ({code})" in out
        assert list(Charge.objects.values_list("id", flat=True)) == ["ch_goodRow000001"]
        assert not Refund.objects.exists()

    def test_payments_that_made_no_charge_are_skipped(self, tmp_path):
        rows = [
            payment("ch_goodRow000001", "10.00", "0.00", "usd", "Paid"),
            payment("pi_canceled00001", "10.00", "", "usd", "Canceled", **{"Amount": ""}),
            payment("pi_incomplete001", "10.00", "", "usd", "Incomplete"),
        ]

        code, out, err = import_stripe(export(tmp_path, rows))

        assert code == 0
        assert (
            "3 rows: 1 charge imported, skipped 2 rows with no charge (Stripe status "
            "Canceled, Incomplete)" in out
        )
        assert "line 3: skipped, Stripe status 'Canceled'" in err
        assert list(Charge.objects.values_list("id", flat=True)) == ["ch_goodRow000001"]


class TestUnusableExports:
    @pytest.mark.parametrize(
        ("text", "said"),
        [
            ("id,Amount,Currency,Status\nch_a,10.00,usd,Paid\n", "missing: amount refunded"),
            (
                "id,amount,currency,status,amount_refunded\nch_a,1000,usd,succeeded,0\n",
                "missing: amount refunded",
            ),
            ("id,Amount,Amount Refunded,Currency,Status\n", "no rows"),
            ("id,Amount,Amount Refunded,Currency,Status\nch_a,10.00,0.00,usd\n", "4 fields"),
        ],
        ids=["no-amount-refunded", "our-own-layout", "no-rows", "short-row"],
    )
    def test_exits_2_and_writes_nothing(self, tmp_path, text, said):
        path = tmp_path / "bad.csv"
        path.write_text(text, encoding="utf-8")
        before = rows_written()

        code, _, err = import_stripe(path)

        assert code == 2 and "unusable file" in err and said in err
        assert rows_written() == before


class TestRunningAgainAndDryRun:
    def test_the_same_export_again_changes_nothing(self, tmp_path):
        path = export(tmp_path, PAYMENTS)
        import_stripe(path)
        before = rows_written()

        code, out, _ = import_stripe(path)

        assert code == 0
        assert "5 rows: 5 charges exist" in out
        assert rows_written() == before

    def test_a_later_export_with_more_refunded_is_a_conflict(self, tmp_path):
        import_stripe(export(tmp_path, PAYMENTS))
        later = payment("ch_usdPartly0001", "1,250.00", "500.00", "usd", "Paid")

        code, out, err = import_stripe(export(tmp_path, [later], "later.csv"))

        assert code == 1
        assert "1 row refused (import_conflict)" in out
        assert "was imported with 30000 refunded" in err and "the file says 50000" in err
        assert Charge.objects.get(pk="ch_usdPartly0001").amount_refunded == 30_000

    def test_a_dry_run_writes_nothing_and_says_would(self, tmp_path):
        path = export(tmp_path, PAYMENTS)
        before = rows_written()

        code, out, _ = import_stripe(path, "--dry-run")

        assert code == 0
        assert rows_written() == before
        assert out.startswith(
            "import_charges (dry run, nothing written): 5 rows: would import 5 charges "
            "(3 with a refund made at the provider); ignored columns: "
        )


class TestWhatCouldBeRefundedTwice:
    """Rows that would leave money refundable here that Stripe already gave back, or
    store amounts on another scale than the one refunds are sent in: refused alone."""

    @pytest.mark.parametrize(
        ("row", "code"),
        [
            (
                payment("ch_partBlank01", "100.00", "", "usd", "Partially refunded"),
                "invalid_amount",
            ),
            (
                payment("ch_partZero002", "100.00", "0.00", "usd", "Partially refunded"),
                "invalid_amount",
            ),
            (
                payment("ch_partAll0003", "100.00", "100.00", "usd", "Partially refunded"),
                "invalid_amount",
            ),
            (payment("ch_paidBlank04", "100.00", "", "usd", "Paid"), "invalid_amount"),
            (payment("ch_huf00000005", "1,000.00", "0.00", "huf", "Paid"), "invalid_currency"),
        ],
        ids=["partly-blank", "partly-zero", "partly-all", "paid-blank", "huf"],
    )
    def test_refused_alone_and_nothing_written(self, tmp_path, row, code):
        good = payment("ch_good0000006", "10.00", "0.00", "usd", "Paid")
        path = export(tmp_path, [good, row])

        status, out, err = import_stripe(path)

        assert status == 1 and code in err
        assert list(Charge.objects.values_list("pk", flat=True)) == ["ch_good0000006"]
        assert not Refund.objects.exists()

    def test_an_imported_refund_is_dated_with_its_charge_not_today(self, tmp_path):
        path = export(tmp_path, [payment("ch_old00000007", "45.00", "45.00", "usd", "Refunded")])

        assert import_stripe(path)[0] == 0

        refund = Refund.objects.get()
        assert refund.created_at == refund.charge.created_at
        assert refund.created_at == datetime(2024, 1, 31, 12, 34, 56, tzinfo=UTC)
