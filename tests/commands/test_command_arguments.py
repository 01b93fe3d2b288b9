"""Command-line numbers out of any sensible range are refused with exit 2, not crashed on."""

import io

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("purge_idempotency_keys", ["--older-than", "1000000"]),
        ("process_refunds", ["--lease-seconds", "99999999999999"]),
        ("reconcile", ["--lease-seconds", "99999999999999"]),
    ],
)
def test_absurd_command_line_numbers_are_refused_not_crashed(command, args):
    with pytest.raises(CommandError) as refused:
        call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())

    assert refused.value.returncode == 2
