"""Every hostile input of tests/hostile_inputs.json that `manage.py refund` can be given:
a CommandError (exit 1) whose message starts with the catalogue's code and nothing
written, or, for hostile-looking text that is a legitimate request, one refund whose text
the admin shows escaped. Arguments are passed in-process, so NUL and lone surrogates
(which a shell hands over as surrogate escapes of undecodable bytes) arrive as they are."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests import hostile

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

OPTIONS = {"amount": "--amount", "reason": "--reason", "note": "--note"}
OPTIONS["idempotency_key"] = "--idempotency-key"


def arguments(case: hostile.Case, charge_id: str) -> list[str]:
    """`--option=value` throughout, so a value starting with "-" stays a value."""
    values = {"amount": case.amount}
    if case.field in OPTIONS:
        values[case.field] = case.value
    charge = case.value if case.field == "charge" else charge_id
    return [*(f"{OPTIONS[name]}={value}" for name, value in values.items()), "--", charge]


@pytest.mark.parametrize("case", hostile.cases("command"))
def test_hostile_input_on_the_refund_command(settings, case):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    charge = hostile.target_charge(case)
    before = hostile.snapshot(charge)
    out = io.StringIO()

    refusal: CommandError | None
    try:
        call_command("refund", *arguments(case, charge.pk), stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        refusal = exc
    else:
        refusal = None
    hostile.tried()

    if case.accepted:
        assert refusal is None, refusal
        refund = hostile.assert_one_refund_written(charge, before, 100)
        assert out.getvalue().startswith(f"{refund.id} 100 usd ")
        hostile.assert_admin_pages_escape(hostile.staff_client(), case, refund)
        return
    assert refusal is not None, f"accepted: {out.getvalue()!r}"
    assert refusal.returncode == 1
    assert str(refusal).startswith(f"{case.expect['code']}: "), str(refusal)[:300]
    hostile.assert_nothing_written(charge, before)
