"""import_charges refuses a row above its currency's amount ceiling, writing nothing for
it, and imports the rest."""

import io

import pytest
from django.core.management import CommandError, call_command

from ledger_app.models import Charge, Event, LedgerEntry

pytestmark = pytest.mark.django_db


def import_file(path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_charges", str(path), stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_rows_above_the_ceiling_are_refused_with_amount_too_large(tmp_path):
    path = tmp_path / "charges.csv"
    path.write_text(
        "id,amount,currency,status\n"
        "ch_usdAtCeiling,99999999,usd,succeeded\n"
        "ch_usdOverCeiling,100000000,usd,succeeded\n"
        "ch_probe,9000000000000000000,usd,succeeded\n"
        "ch_jpyOverCeiling,100000000,jpy,succeeded\n"
        "ch_idrAtCeiling,999999999999,idr,succeeded\n"
        "ch_idrOverCeiling,1000000000000,idr,succeeded\n",
        encoding="utf-8",
    )

    code, out, err = import_file(path)

    assert code == 1
    assert "6 rows: 2 charges imported, 4 rows refused (amount_too_large)" in out
    assert (
        "line 3: refused, amount_too_large: Amount must be at most $999,999.99 "
        "(99999999 minor units) for USD." in err
    )
    assert "line 4: refused, amount_too_large" in err
    assert "line 5: refused, amount_too_large" in err and "for JPY" in err
    assert "line 7: refused, amount_too_large" in err and "for IDR" in err
    assert set(Charge.objects.values_list("id", flat=True)) == {
        "ch_usdAtCeiling",
        "ch_idrAtCeiling",
    }
    assert set(LedgerEntry.objects.values_list("charge_id", flat=True)) == {
        "ch_usdAtCeiling",
        "ch_idrAtCeiling",
    }
    assert Event.objects.count() == 2


def test_the_ceiling_is_read_when_the_file_is_imported(tmp_path, settings):
    settings.AMOUNT_CEILINGS = {"jpy": 1_000}
    path = tmp_path / "charges.csv"
    path.write_text(
        "id,amount,currency,status\nch_jpyOk,1000,jpy,succeeded\nch_jpyOver,1001,jpy,succeeded\n",
        encoding="utf-8",
    )

    code, out, err = import_file(path)

    assert code == 1
    assert "line 3: refused, amount_too_large: Amount must be at most ¥1,000" in err
    assert list(Charge.objects.values_list("id", flat=True)) == ["ch_jpyOk"]


def test_a_stored_charge_above_a_lowered_ceiling_is_refused_not_reported_as_existing(
    tmp_path, settings
):
    path = tmp_path / "charges.csv"
    path.write_text("id,amount,currency,status\nch_big,50000,usd,succeeded\n", encoding="utf-8")
    assert import_file(path)[0] == 0
    settings.AMOUNT_CEILINGS = {"usd": 10_000}

    code, out, _ = import_file(path)

    assert code == 1
    assert "import_charges: 1 row: 1 row refused (amount_too_large)" in out
    assert Charge.objects.get().amount == 50_000  # never changed
