"""services/import_files.py: a Stripe export's row checked into a charge, in the currency's
own minor units, or refused with its code; a file's header read."""

import pytest

from ledger_app import errors
from ledger_app.charges.import_files import Format, Skipped, read_import_rows, stripe_row
from ledger_app.csv_files import UnusableFile
from ledger_app.models import Charge

pytestmark = pytest.mark.sqlite_pass


def stripe_values(**changed) -> dict[str, str]:
    values = {
        "id": "ch_3Stripe0001",
        "amount": "1,250.00",
        "amount refunded": "0.00",
        "currency": "usd",
        "status": "Paid",
    }
    return {**values, **changed}


class TestStripeRows:
    @pytest.mark.parametrize(
        ("amount", "currency", "minor"),
        [("1,250.00", "usd", 125_000), ("5,000", "jpy", 5_000), ("12.345", "kwd", 12_345)],
    )
    def test_major_units_become_the_currencys_minor_units_exactly(self, amount, currency, minor):
        row = stripe_row(
            stripe_values(amount=amount, currency=currency, **{"amount refunded": "0"})
        )
        assert (row.amount, row.currency, row.status) == (minor, currency, Charge.Status.SUCCEEDED)
        assert row.refunded_before == 0

    def test_more_decimals_than_the_currency_has_refuse_the_row(self):
        with pytest.raises(errors.InvalidAmount):
            stripe_row(stripe_values(amount="12.345"))

    def test_refunded_means_refunded_in_full(self):
        row = stripe_row(stripe_values(status="Refunded", **{"amount refunded": ""}))
        assert row.refunded_before == row.amount == 125_000

    def test_a_blank_amount_refunded_says_nothing_and_is_refused(self):
        with pytest.raises(errors.InvalidAmount, match="Amount Refunded is blank"):
            stripe_row(stripe_values(**{"amount refunded": ""}))

    @pytest.mark.parametrize("status", ["Canceled", "incomplete"])
    def test_a_payment_that_made_no_charge_is_skipped(self, status):
        with pytest.raises(Skipped):
            stripe_row(stripe_values(status=status))

    @pytest.mark.parametrize("status", ["Pending", "Disputed"])
    def test_a_payment_that_has_not_ended_is_refused(self, status):
        with pytest.raises(errors.InvalidChargeStatus):
            stripe_row(stripe_values(status=status))


class TestHeaders:
    def test_a_stripe_export_read_as_our_layout_is_told_to_add_the_flag(self, tmp_path):
        path = tmp_path / "export.csv"
        path.write_text("id,Amount,Amount Refunded,Currency,Status\nch_1,1.00,0.00,usd,Paid\n")
        _header, rows = read_import_rows(path, Format.NATIVE)
        with pytest.raises(UnusableFile, match="line 2: amount '1.00'.*add --format stripe"):
            list(rows)

    def test_unused_and_metadata_columns_are_told_apart(self, tmp_path):
        path = tmp_path / "export.csv"
        path.write_text(
            "id,Amount,Amount Refunded,Currency,Status,Fee,order_id (metadata)\n"
            "ch_1,1.00,0.00,usd,Paid,0.30,A-17\n"
        )
        header, rows = read_import_rows(path, Format.STRIPE)
        assert header.ignored == ["Fee"]
        assert list(rows)[0][1]["metadata:order_id"] == "A-17"
