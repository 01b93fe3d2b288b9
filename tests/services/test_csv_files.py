"""services/csv_files.py: the rules both batch commands read CSV by. A file that breaks
them is unusable as a whole; nothing of it is used."""

import pytest

from ledger_app.services.csv_files import UnusableFile, minor_units_or_unusable, open_csv


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
