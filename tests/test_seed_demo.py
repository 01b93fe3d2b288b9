import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from ledger_app.charges.services import record_charge
from ledger_app.management.commands.seed_demo import DEMO_CHARGES, history_rows
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.refunds.selectors import needing_attention
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite_pass]


def test_seed_demo_loads_once_and_prints_the_password_once(capsys):
    call_command("seed_demo")
    first = capsys.readouterr().out
    counts = (Charge.objects.count(), Refund.objects.count(), LedgerEntry.objects.count())

    call_command("seed_demo")
    second = capsys.readouterr().out

    succeeded = sum(row[3] == "succeeded" for row in DEMO_CHARGES)
    listed = sum(len(row[5]) for row in DEMO_CHARGES)
    # One entry per succeeded charge; reserved + settled for each listed refund but the
    # timed-out one (unknown: reserved only); the queued one (pending) and the one over
    # Ana's limit (awaiting approval) are reserved only. The month of history: a charge
    # and a settled refund each (three entries).
    history = len(history_rows())
    assert counts == (
        len(DEMO_CHARGES) + history,
        listed + 2 + history,
        succeeded + 2 * listed - 1 + 2 + 3 * history,
    )
    statuses = list(Refund.objects.values_list("status", flat=True))
    assert sorted(set(statuses)) == [
        "awaiting_approval",
        "failed",
        "pending",
        "succeeded",
        "unknown",
    ]
    assert [statuses.count(s) for s in ("failed", "pending", "unknown")] == [1, 1, 1]
    waiting = Refund.objects.get(status="awaiting_approval")
    assert waiting.created_by is not None
    assert waiting.created_by.username == "ana" and waiting.amount == 45_000
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


def test_the_needs_attention_queue_shows_one_refund_of_each_kind(capsys):
    call_command("seed_demo")

    queue = Refund.objects.filter(needing_attention())
    assert sorted(queue.values_list("status", flat=True)) == ["failed", "pending", "unknown"]
    stale = queue.get(status="pending")
    assert stale.charge_id == "ch_demoUsdQueued0000000014" and stale.dispatch_attempts == 0


def test_the_demo_has_a_month_of_refunds_for_the_chart(capsys):
    """Refunds on many of the last 29 days, by every reason and none, all settled, each
    dated after its charge; today's demo refunds stay today's."""
    from datetime import timedelta

    from django.utils import timezone

    call_command("seed_demo")

    rows = history_rows()
    history = Refund.objects.filter(charge_id__in=[row[0] for row in rows])
    now = timezone.now()
    days = {(now - refund.created_at).days for refund in history}
    assert len(rows) >= 30 and history.count() == len(rows)
    assert len(days) >= 15 and max(days) < 30 and min(days) >= 1
    reasons = {refund.reason or "none" for refund in history}
    assert reasons == {"requested_by_customer", "duplicate", "fraudulent", "none"}
    assert {refund.currency for refund in history} == {"usd", "eur", "jpy"}
    assert set(history.values_list("status", flat=True)) == {"succeeded"}
    assert all(r.created_at > r.charge.created_at for r in history.select_related("charge"))
    today = Refund.objects.filter(created_at__gte=now - timedelta(hours=2))
    assert today.exists()


def test_it_says_what_it_made_and_what_is_there(capsys):
    demo = len(DEMO_CHARGES) + len(history_rows())

    call_command("seed_demo")
    first = capsys.readouterr().out
    ChargeFactory()  # a charge of someone else's, e.g. made through the API
    call_command("seed_demo")
    second = capsys.readouterr().out

    assert f"Demo data: {demo} charges created; {demo} charges in the database.\n" in first
    assert (
        f"Demo data: 0 charges created ({demo} demo charges already there); "
        f"{demo + 1} charges in the database.\n"
    ) in second
    assert "in all" not in first + second
    assert (
        f"The {len(DEMO_CHARGES)} that show each case (the other {len(history_rows())} " in second
    )
    listed = [line for line in second.splitlines() if line.startswith("  ch_demo")]
    assert len(listed) == len(DEMO_CHARGES)


def test_a_demo_charge_made_before_is_counted_apart(capsys):
    record_charge(
        charge_id="ch_demoUsdPending000000009", amount=700, currency="usd", status="pending"
    )

    call_command("seed_demo")

    demo = len(DEMO_CHARGES) + len(history_rows())
    assert (
        f"Demo data: {demo - 1} charges created (1 demo charge already there); "
        f"{demo} charges in the database."
    ) in capsys.readouterr().out
