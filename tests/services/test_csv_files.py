"""ledger_app/csv_files.py: the rules both batch commands read CSV by (a file that breaks
them is unusable as a whole; nothing of it is used), and the one writer of every CSV file
we write, whose cells never run as formulas in a spreadsheet set to `,`, `;` or tabs."""

import csv
import io
import re
from pathlib import Path

import pytest

from ledger_app.csv_files import (
    UnusableFile,
    csv_writer,
    defused,
    minor_units_or_unusable,
    open_csv,
)
from tests.spreadsheet import HOSTILE_CELLS, NO_FORMULAS, SEPARATORS, formulas_in, runs_as_formula

pytestmark = pytest.mark.sqlite_pass

ROOT = Path(__file__).resolve().parents[2]


class TestMinorUnits:
    @pytest.mark.parametrize(("text", "value"), [("", None), ("0", 0), ("1234", 1234)])
    def test_blank_is_none_and_digits_are_their_number(self, text, value):
        assert minor_units_or_unusable(text, line=2) == value

    @pytest.mark.parametrize("text", ["12.50", "1,250", "-5", "1e3", "5\n", "٣", "1" * 20])
    def test_anything_else_makes_the_whole_file_unusable_naming_line_and_column(self, text):
        with pytest.raises(UnusableFile) as refused:
            minor_units_or_unusable(text, line=7, column="amount_refunded")
        assert str(refused.value).startswith("line 7: amount_refunded ")
        assert "whole number of minor units" in str(refused.value)


class TestOpeningAFile:
    def test_a_byte_order_mark_is_not_part_of_the_first_column(self, tmp_path):
        path = tmp_path / "with-bom.csv"
        path.write_bytes("\ufeffcharge,amount\n".encode())
        with open_csv(path) as handle:
            assert handle.readline() == "charge,amount\n"

    def test_a_file_that_is_not_utf8_is_unusable_with_where_it_breaks(self, tmp_path):
        path = tmp_path / "latin1.csv"
        path.write_bytes("charge,note\nch_1,caf\xe9\n".encode("latin-1"))
        refused = pytest.raises(UnusableFile, match=r"not UTF-8 \(invalid continuation byte")
        with refused, open_csv(path) as handle:
            handle.read()


def written(*rows: list[object]) -> str:
    handle = io.StringIO(newline="")
    writer = csv_writer(handle)
    for row in rows:
        writer.writerow(row)
    return handle.getvalue()


class TestEveryCellWeWriteIsDefused:
    @pytest.mark.parametrize("cell", HOSTILE_CELLS)
    @pytest.mark.parametrize("position", ["alone", "first", "middle", "last"])
    def test_a_hostile_cell_runs_in_no_spreadsheet(self, cell, position):
        row = {
            "alone": [cell],
            "first": [cell, "ch_1", -500],
            "middle": ["ch_1", cell, -500],
            "last": ["ch_1", -500, cell],
        }[position]

        text = written(["charge", "note", "amount"], row)

        assert formulas_in(text) == NO_FORMULAS

    @pytest.mark.parametrize("cell", HOSTILE_CELLS)
    def test_a_spreadsheet_set_to_commas_reads_one_cell_it_shows_as_text(self, cell):
        [_, row] = read_as(written(["charge", "note"], ["ch_1", cell]), ",")

        assert row[0] == "ch_1" and row[1] == defused(cell)
        assert row[1].startswith("'") or not runs_as_formula(row[1])
        assert row[1].replace("'", "") == cell.replace("'", "")  # nothing but apostrophes added

    def test_the_cell_of_the_finding_is_one_cell_with_either_separator(self):
        text = written(["x;=cmd|' /C calc'!A0"])

        for separator in (",", ";"):
            assert read_as(text, separator) == [["x;'=cmd|' /C calc'!A0"]]

    @pytest.mark.parametrize(
        "cell", ["a=b, -1 is fine", "Refund for order 12-3", "ch_3Nx", "", "50%", "x@y.z"]
    )
    def test_ordinary_text_is_left_as_it_is(self, cell):
        assert defused(cell) == cell

    def test_whole_numbers_stay_numbers_a_spreadsheet_can_sum_negative_ones_too(self):
        text = written(["amount", "delta"], [500, -500], [0, -1])

        for separator in SEPARATORS:
            assert formulas_in(text)[separator] == []
        assert read_as(text, ",") == [["amount", "delta"], ["500", "-500"], ["0", "-1"]]
        assert text.splitlines()[1] == '"500","-500"'  # quoted, and still a number

    def test_none_is_an_empty_cell_and_text_that_looks_negative_is_text(self):
        assert written([None, "-$5.00"]) == '"","\'-$5.00"\r\n'


def read_as(text: str, separator: str) -> list[list[str]]:
    """Read strictly, as a spreadsheet set to `separator` reads a file written for it."""
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=separator))


WRITERS = re.compile(r"\bcsv\s*\.\s*(?:writer|DictWriter)\b|from\s+csv\s+import\b")


class TestEveryCsvWriterGoesThroughTheOneFunction:
    def sources(self) -> list[Path]:
        folders = ("ledger_app", "backoffice", "serving", "simulated_provider", "scripts")
        return [
            path
            for folder in folders
            for path in (ROOT / folder).rglob("*")
            if path.is_file()
            and path.suffix in ("", ".py", ".sh")
            and "__pycache__" not in path.parts
        ]

    def test_nothing_but_csv_files_makes_a_csv_writer(self):
        makers = [
            f"{path.relative_to(ROOT)}:{number}"
            for path in self.sources()
            if path != ROOT / "ledger_app/csv_files.py"
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if WRITERS.search(line)
        ]

        assert len(self.sources()) > 100 and makers == []

    def test_every_module_that_writes_rows_takes_the_one_writer(self):
        writing = {
            str(path.relative_to(ROOT))
            for path in self.sources()
            if path.suffix == ".py" and ".writerow" in path.read_text()
        } - {"ledger_app/csv_files.py"}

        assert writing == {
            "ledger_app/admin/export.py",
            "ledger_app/management/commands/bulk_refund.py",
        }
        takes = re.compile(r"from ledger_app\.csv_files import [^)]*\bcsv_writer\b")
        for name in writing:
            assert takes.search((ROOT / name).read_text()), name
