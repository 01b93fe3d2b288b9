import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from ledger_app.management.commands.seed_demo import DEMO_CHARGES
from ledger_app.models import Charge, LedgerEntry, Refund
from tests.invariants import assert_ledger_invariants

pytestmark = pytest.mark.django_db


def test_seed_demo_loads_once_and_prints_the_password_once(capsys):
    call_command("seed_demo")
    first = capsys.readouterr().out
    counts = (Charge.objects.count(), Refund.objects.count(), LedgerEntry.objects.count())

    call_command("seed_demo")
    second = capsys.readouterr().out

    succeeded = sum(row[3] == "succeeded" for row in DEMO_CHARGES)
    refunds = sum(len(row[5]) for row in DEMO_CHARGES)
    # one entry per succeeded charge; a reserved and a succeeded entry per refund
    assert counts == (len(DEMO_CHARGES), refunds, succeeded + 2 * refunds)
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    assert (Charge.objects.count(), Refund.objects.count(), LedgerEntry.objects.count()) == counts
    assert "Admin login: admin / " in first
    assert "Admin login: admin (" in second and "admin / " not in second
    assert "Demo API key: sk_" in first and "(shown this once)" in first
    assert "Demo API key: sk_" in second and "(shown this once)" not in second
    assert get_user_model().objects.get(username="admin").is_superuser
    assert_ledger_invariants()


def test_demo_data_has_partly_and_fully_refunded_charges_in_three_currencies(capsys):
    call_command("seed_demo")

    succeeded = Charge.objects.filter(status="succeeded")
    assert {"usd", "eur", "jpy"} <= set(succeeded.values_list("currency", flat=True))
    assert any(c.refunded for c in succeeded)
    assert any(0 < c.amount_refunded < c.amount for c in succeeded)
    assert Charge.objects.get(pk="ch_demoJpyPartial000000007").amount_refunded == 7_500
