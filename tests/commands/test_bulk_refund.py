"""bulk_refund: every row refunded once, however often or however many times at once it runs."""

import signal
import time

import pytest

from ledger_app.models import Charge, IdempotencyRecord, Refund
from tests.commands.bulk_runs import bulk, counts, report_rows, write_csv
from tests.factories import ChargeFactory
from tests.processes import run_command, start_command
from tests.spreadsheet import HOSTILE_CELLS, NO_FORMULAS, formulas_in

pytestmark = pytest.mark.sqlite_pass


@pytest.mark.django_db
class TestBulkRefund:
    def test_refunds_every_row_and_reports_each(self, tmp_path):
        a, b = ChargeFactory(amount=5_000), ChargeFactory(amount=3_000, currency="jpy")
        file = write_csv(
            tmp_path / "in.csv",
            [
                [a.pk, "1000", "duplicate", "row 1"],
                [a.pk, "", "requested_by_customer", "the rest"],
                [b.pk, "500", "", ""],
            ],
        )

        code, out, _ = bulk(file, "--batch-id", "b1", "--report", tmp_path / "report.csv")

        assert code == 0
        a.refresh_from_db()
        b.refresh_from_db()
        assert (a.amount_refunded, b.amount_refunded) == (5_000, 500)
        assert [r["outcome"] for r in report_rows(tmp_path / "report.csv")] == ["refunded"] * 3
        assert [r["idempotency_key"] for r in report_rows(tmp_path / "report.csv")] == [
            "bulk:b1:1",
            "bulk:b1:2",
            "bulk:b1:3",
        ]
        assert "3 rows: 3 refunded" in out and "usd $50.00" in out and "jpy ¥500" in out
        assert set(Refund.objects.values_list("source", flat=True)) == {"bulk"}

    def test_running_the_same_file_again_replays_every_row(self, tmp_path):
        charge = ChargeFactory(amount=5_000)
        file = write_csv(tmp_path / "in.csv", [[charge.pk, "1000", "", ""]] * 3)
        bulk(file, "--batch-id", "b1")
        before = counts()

        code, out, _ = bulk(file, "--batch-id", "b1", "--report", tmp_path / "again.csv")

        assert code == 0
        assert counts() == before
        assert {r["outcome"] for r in report_rows(tmp_path / "again.csv")} == {"replayed"}
        assert "3 replayed" in out

    def test_an_edited_row_under_the_same_batch_is_refused_loudly(self, tmp_path):
        charge = ChargeFactory(amount=5_000)
        bulk(write_csv(tmp_path / "in.csv", [[charge.pk, "1000", "", ""]]), "--batch-id", "b1")
        before = counts()

        code, out, err = bulk(
            write_csv(tmp_path / "edited.csv", [[charge.pk, "2000", "", ""]]), "--batch-id", "b1"
        )

        assert code == 1
        assert "idempotency_key_reused 1" in out
        assert "REFUSED" in err and "new --batch-id" in err
        assert counts() == before

    def test_refused_rows_are_reported_with_their_code_and_exit_1(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(
            tmp_path / "in.csv",
            [
                [charge.pk, "600", "", ""],
                [charge.pk, "600", "", ""],
                ["ch_unknown", "100", "", ""],
                [charge.pk, "100", "because", ""],
            ],
        )

        code, out, _ = bulk(file, "--batch-id", "b1", "--report", tmp_path / "r.csv")

        assert code == 1
        rows = report_rows(tmp_path / "r.csv")
        assert [(r["outcome"], r["code"]) for r in rows] == [
            ("refunded", ""),
            ("refused", "amount_too_large"),
            ("refused", "resource_missing"),
            ("refused", "invalid_reason"),
        ]
        assert "amount_too_large 1, invalid_reason 1, resource_missing 1" in out

    def test_the_report_runs_no_cell_of_the_file_in_a_spreadsheet(self, tmp_path):
        # The file's charge ids, reasons and notes come back in the report (as the row, and
        # in the messages naming them): each hostile cell, in each place.
        charge = ChargeFactory(amount=100_000)
        rows = [[cell, "100", "", ""] for cell in HOSTILE_CELLS]
        rows += [[charge.pk, "100", cell, ""] for cell in HOSTILE_CELLS]
        rows += [[charge.pk, "100", "", cell] for cell in HOSTILE_CELLS]
        file = write_csv(tmp_path / "in.csv", rows)

        code, _, _ = bulk(file, "--batch-id", "b1", "--report", tmp_path / "r.csv")

        assert code == 1
        report = (tmp_path / "r.csv").read_text(encoding="utf-8")
        assert len(report_rows(tmp_path / "r.csv")) == len(rows)
        assert report.count("calc") >= 3
        assert formulas_in(report) == NO_FORMULAS

    def test_dry_run_writes_nothing_and_counts_earlier_rows(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(tmp_path / "in.csv", [[charge.pk, "600", "", ""]] * 2)
        before = counts()

        code, out, _ = bulk(file, "--batch-id", "b1", "--dry-run", "--report", tmp_path / "r.csv")

        assert counts() == before
        assert code == 1  # the second row would be over the balance once the first is done
        assert [(r["outcome"], r["code"]) for r in report_rows(tmp_path / "r.csv")] == [
            ("would_refund", ""),
            ("refused", "amount_too_large"),
        ]
        assert out.startswith("bulk_refund (dry run): 2 rows")

    def test_dry_run_treats_a_repeated_key_as_the_real_run_does(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(
            tmp_path / "in.csv",
            [[charge.pk, "600", "k1"], [charge.pk, "600", "k1"], [charge.pk, "300", "k1"]],
            header=("charge", "amount", "idempotency_key"),
        )

        def outcomes(*extra):
            report = tmp_path / f"report{len(extra)}.csv"
            bulk(file, "--batch-id", "b", "--report", report, *extra)
            return [(r["outcome"], r["code"]) for r in report_rows(report)]

        dry = outcomes("--dry-run")
        real = outcomes()

        assert dry == [
            ("would_refund", ""),
            ("would_replay", ""),
            ("refused", "idempotency_key_reused"),
        ]
        assert real == [("refunded", ""), ("replayed", ""), ("refused", "idempotency_key_reused")]

    def test_rows_with_their_own_key_use_it(self, tmp_path):
        charge = ChargeFactory(amount=1_000)
        file = write_csv(
            tmp_path / "in.csv",
            [[charge.pk, "100", "order-7"]],
            header=("charge", "amount", "idempotency_key"),
        )

        bulk(file, "--batch-id", "b1")

        assert IdempotencyRecord.objects.get().key == "order-7"


@pytest.mark.django_db
class TestUnusableFiles:
    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (b"", "the file is empty"),
            (b"charge,amount\n", "no rows"),
            (b"amount,reason\n100,duplicate\n", "missing ['charge']"),
            (b"charge,amout\nch_x,100\n", "unknown ['amout']"),
            (b"charge,amount\nch_x,12.34\n", "not a whole number of minor units"),
            (b"charge,amount\nch_x,1e3\n", "not a whole number"),
            (b"charge,amount\nch_x,-5\n", "not a whole number"),
            (b"charge,amount\nch_\xe9,100\n", "not UTF-8"),
            (b"charge,amount\nch_x,100,extra\n", "fields"),
        ],
        ids=[
            "empty",
            "header-only",
            "missing-column",
            "unknown-column",
            "decimal-amount",
            "exponent-amount",
            "negative-amount",
            "latin-1",
            "extra-field",
        ],
    )
    def test_an_unusable_file_exits_2_and_writes_nothing(self, tmp_path, content, message):
        charge = ChargeFactory(amount=1_000)
        path = tmp_path / "bad.csv"
        path.write_bytes(content.replace(b"ch_x", charge.pk.encode()))
        before = counts()

        code, _, err = bulk(path, "--batch-id", "b1")

        assert code == 2
        assert "unusable file" in err and message in err
        assert counts() == before

    def test_a_bad_row_at_the_end_stops_the_file_before_any_refund(self, tmp_path):
        charge = ChargeFactory(amount=100_000)
        rows = [[charge.pk, "10", "", ""]] * 50 + [[charge.pk, "10.5", "", ""]]

        code, _, _ = bulk(write_csv(tmp_path / "in.csv", rows), "--batch-id", "b1")

        assert code == 2
        assert Refund.objects.count() == 0

    def test_a_missing_file_exits_2(self, tmp_path):
        assert bulk(tmp_path / "nope.csv", "--batch-id", "b1")[0] == 2


def rows_for(charges, per_charge):
    return [[c.pk, "100", "duplicate", ""] for c in charges for _ in range(per_charge)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
class TestInterruptedAndConcurrentRuns:
    def test_killed_halfway_then_rerun_refunds_every_row_exactly_once(self, tmp_path):
        # 500 rows, killed after 150: a third in, two thirds left (it was 2,000 and 700, a
        # minute of make test for the same proof).
        charges = [ChargeFactory(amount=100_000) for _ in range(50)]
        file = write_csv(tmp_path / "in.csv", rows_for(charges, 10))

        first = start_command("bulk_refund", str(file), "--batch-id", "night-1")
        try:
            # A wait for the run to get that far, not a speed limit: under load it takes minutes.
            deadline = time.monotonic() + 600
            while Refund.objects.count() < 150:
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        done_before = Refund.objects.count()
        assert 150 <= done_before < 500

        rerun = run_command(
            "bulk_refund",
            str(file),
            "--batch-id",
            "night-1",
            "--report",
            str(tmp_path / "rerun.csv"),
            timeout=300,
        )

        assert rerun.returncode == 0, rerun.stderr
        report = report_rows(tmp_path / "rerun.csv")
        assert len(report) == 500
        outcomes = [r["outcome"] for r in report]
        assert outcomes.count("replayed") >= done_before - 1  # one may have died mid-row
        assert outcomes.count("replayed") + outcomes.count("refunded") == 500
        assert Refund.objects.count() == 500
        keys = set(IdempotencyRecord.objects.values_list("key", flat=True))
        assert keys == {f"bulk:night-1:{n}" for n in range(1, 501)}
        assert all(c.amount_refunded == 1_000 for c in Charge.objects.all())

    def test_the_same_file_run_twice_at_once_refunds_no_row_twice(self, tmp_path):
        charges = [ChargeFactory(amount=100_000) for _ in range(50)]
        file = write_csv(tmp_path / "in.csv", rows_for(charges, 6))  # 300 rows

        runs = [
            start_command(
                "bulk_refund",
                str(file),
                "--batch-id",
                "twin",
                "--report",
                str(tmp_path / f"r{n}.csv"),
            )
            for n in range(2)
        ]
        results = [run.communicate(timeout=300) for run in runs]

        assert [run.returncode for run in runs] == [0, 0], results
        assert Refund.objects.count() == 300
        first, second = report_rows(tmp_path / "r0.csv"), report_rows(tmp_path / "r1.csv")
        for a, b in zip(first, second, strict=True):
            assert {a["outcome"], b["outcome"]} == {"refunded", "replayed"}
            assert a["refund"] == b["refund"]
        assert all(c.amount_refunded == 600 for c in Charge.objects.all())
