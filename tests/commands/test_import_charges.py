"""import_charges refuses rows it could store but not read back."""

import io

import pytest
from django.core.management import CommandError, call_command

from ledger_app.models import Charge

pytestmark = pytest.mark.django_db


def test_import_refuses_dates_the_database_cannot_read_back(tmp_path):
    path = tmp_path / "charges.csv"
    path.write_text(
        "id,amount,currency,status,created\n"
        "ch_old,100,usd,succeeded,0001-01-01T00:00:00+01:00\n"
        "ch_far,100,usd,succeeded,9999-12-31T23:59:59-01:00\n",
        encoding="utf-8",
    )

    with pytest.raises(CommandError) as refused:
        call_command("import_charges", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    assert refused.value.returncode == 1
    assert Charge.objects.count() == 0
