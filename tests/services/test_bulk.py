"""services/bulk.py and bulk_jobs.py without the command: how a file becomes rows, each
row its key and request, and each charge its job."""

import pytest

from ledger_app.csv_files import UnusableFile
from ledger_app.models import Refund
from ledger_app.refunds.bulk import BulkRow, check_bulk_file, read_bulk_rows, row_request
from ledger_app.refunds.bulk_jobs import job_for
from ledger_app.refunds.services import RefundRequest

pytestmark = pytest.mark.sqlite_pass


def csv_file(tmp_path, text: str):
    path = tmp_path / "rows.csv"
    path.write_text(text, encoding="utf-8")
    return path


class TestReadingRows:
    def test_rows_are_numbered_from_one_after_the_header_and_blank_lines_are_skipped(
        self, tmp_path
    ):
        path = csv_file(tmp_path, "Charge, Amount ,note\nch_a,250,late\n\n , ,\nch_b,,\n")
        assert list(read_bulk_rows(path)) == [
            BulkRow(1, "ch_a", 250, "", "late", ""),
            BulkRow(4, "ch_b", None, "", "", ""),
        ]
        assert check_bulk_file(path) == 2

    @pytest.mark.parametrize(
        ("text", "said"),
        [
            ("", "the file is empty"),
            ("charge\n", "the file has a header but no rows"),
            ("amount\n5\n", "missing ['charge']"),
            ("charge,colour\nch_a,red\n", "unknown ['colour']"),
            ("charge,charge\nch_a,ch_b\n", "each once"),
            ("charge,amount\nch_a\n", "line 2: 1 fields, the header has 2"),
            ("charge,amount\nch_a,12.50\n", "line 2: amount '12.50' is not a whole number"),
        ],
    )
    def test_an_unusable_file_is_refused_whole_saying_why(self, tmp_path, text, said):
        with pytest.raises(UnusableFile, match=said.replace("[", r"\[").replace("(", r"\(")):
            check_bulk_file(csv_file(tmp_path, text))


class TestRowRequests:
    def test_a_row_without_a_key_gets_one_from_its_batch_and_number(self):
        row = BulkRow(3, "ch_a", 100, "duplicate", "twice", "")
        _row, key, request = row_request(row, batch_id="2026-12-outage", actor="cli:ana")
        assert key == "bulk:2026-12-outage:3"
        assert request == RefundRequest(
            charge_id="ch_a",
            amount=100,
            idempotency_key="bulk:2026-12-outage:3",
            reason="duplicate",
            note="twice",
            actor="cli:ana",
            source=Refund.Source.BULK,
            batch_id="2026-12-outage",
            refuse_repeats_within=None,
        )

    def test_a_rows_own_key_wins_whatever_the_batch(self):
        row = BulkRow(3, "ch_a", None, "", "", "order-9-refund")
        assert row_request(row, batch_id="one", actor="x")[1] == "order-9-refund"
        assert row_request(row, batch_id="two", actor="x")[1] == "order-9-refund"


class TestJobs:
    def test_every_row_of_a_charge_goes_to_the_same_job_and_jobs_share_the_charges(self):
        charges = [f"ch_{n:05d}" for n in range(400)]
        for jobs in (2, 3, 4):
            assigned = [job_for(charge, jobs) for charge in charges]
            assert assigned == [job_for(charge, jobs) for charge in charges]
            assert set(assigned) == set(range(jobs))
            assert min(assigned.count(j) for j in range(jobs)) > 400 / jobs / 2
