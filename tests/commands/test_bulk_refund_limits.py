"""bulk_refund --requested-by: the rows are that person's, so their refund limits apply and
rows over them wait, reserved, for another person's approval, reported as such."""

import pytest

from ledger_app.models import Refund, RefundLimit
from tests.commands.bulk_runs import bulk, report_rows, write_csv
from tests.factories import ChargeFactory
from tests.processes import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(django_user_model):
    user = django_user_model.objects.create_user("ana", password="x", is_staff=True)
    RefundLimit.objects.create(user=user, currency="usd", per_refund=1_000, per_day=1_500)
    return user


def test_rows_over_the_requesters_limits_wait_for_approval(tmp_path, agent, inline_dispatch):
    a, b, c = (ChargeFactory(amount=5_000) for _ in range(3))
    file = write_csv(
        tmp_path / "in.csv",
        [
            [a.pk, "1000", "duplicate", ""],  # at the per-refund limit: refunded
            [b.pk, "1001", "duplicate", ""],  # one cent over it: waits
            [c.pk, "600", "duplicate", ""],  # 1000 + 600 > 1500 a day: waits
            [c.pk, "500", "duplicate", ""],  # 1000 + 500 = 1500: refunded
        ],
    )
    report = tmp_path / "report.csv"

    dry = bulk(file, "--batch-id", "b1", "--requested-by", "ana", "--dry-run")
    code, out, _ = bulk(file, "--batch-id", "b1", "--requested-by", "ana", "--report", report)

    expected = ["refunded", "awaiting_approval", "awaiting_approval", "refunded"]
    assert dry[0] == 0
    assert "2 would_await_approval" in dry[1] and "2 would_refund" in dry[1]
    assert code == 0, out
    assert [r["outcome"] for r in report_rows(report)] == expected
    assert "2 awaiting_approval" in out and "2 refunded" in out
    refunds = Refund.objects.order_by("created_at", "id")
    assert [r.status for r in refunds] == [
        "succeeded",
        "awaiting_approval",
        "awaiting_approval",
        "succeeded",
    ]
    assert all(r.created_by_id == agent.pk for r in refunds)
    b.refresh_from_db()
    assert b.amount_refunded == 1_001  # reserved while it waits


def test_without_requested_by_the_operator_is_not_limited(tmp_path, agent, inline_dispatch):
    charge = ChargeFactory(amount=5_000)
    file = write_csv(tmp_path / "in.csv", [[charge.pk, "4000", "duplicate", ""]])

    code, out, _ = bulk(file, "--batch-id", "b2")

    assert code == 0 and "1 refunded" in out


def test_an_unknown_requester_is_refused_with_exit_2_and_nothing_written(tmp_path):
    charge = ChargeFactory(amount=5_000)
    file = write_csv(tmp_path / "in.csv", [[charge.pk, "100", "duplicate", ""]])

    result = run_command("bulk_refund", str(file), "--batch-id", "b3", "--requested-by", "nobody")

    assert result.returncode == 2
    assert "no active staff user 'nobody'" in result.stderr
    assert not Refund.objects.exists()
