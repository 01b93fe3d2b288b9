"""CSV files: those the batch commands read (bulk_refund, import_charges), opened safely,
with the one rule for minor-units columns (a file that breaks these is unusable as a whole,
and nothing is written from it); and `csv_writer`, the one way every CSV file we write
(admin exports, bulk_refund --report) is written, so no cell of it runs as a formula."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

DIGITS = re.compile(r"^[0-9]{1,19}\Z")  # \Z, not $: "5\n" is not a number of minor units


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP: CSV
# injection), with their full-width and small forms, which some spreadsheets read as them.
FORMULA_STARTS = "=+-@\uff1d\uff0b\uff0d\uff20\ufe66\ufe62\ufe63\ufe6b"
# Where a spreadsheet may start a cell inside one of ours: a reader set to `;` or to tabs
# splits at them (we write `,`), and a line break ends a row wherever quoting went astray.
CELL_BREAKS = ";\t\r\n"
# Before a formula start at the start of a cell or just after a break, past spaces (a
# spreadsheet may trim them) and double quotes (a reader may take one as the start of a
# quoted cell): where the apostrophe goes.
_FORMULA_AHEAD = re.compile(
    rf'(?:^|(?<=[{CELL_BREAKS}]))(?=(?:[^\S{CELL_BREAKS}]|")*[{re.escape(FORMULA_STARTS)}])'
)


def defused(value: object) -> object:
    """A cell as we write it: text that a spreadsheet would run as a formula is shown
    instead. An apostrophe goes before every formula start at the start of the text or
    right after a `;`, tab or line break (past any spaces and `"`), and before a tab or carriage
    return that starts the text; Excel and LibreOffice read a leading apostrophe as "this
    is text". Whole numbers (amounts in minor units, row numbers) stay numbers, negative
    ones included, so a column of them can be summed; None is an empty cell. Anything else
    is written as its text."""
    if value is None:
        return ""
    if type(value) is int:
        return value
    text = _FORMULA_AHEAD.sub("'", str(value))
    return "'" + text if text.startswith(("\t", "\r")) else text


class _DefusingWriter:
    def __init__(self, handle: Any) -> None:
        # Every cell quoted: a reader set to `;` (or `,`) then sees one cell where we wrote one.
        self._writer = csv.writer(handle, quoting=csv.QUOTE_ALL)

    def writerow(self, row: Iterable[object]) -> Any:
        """What the handle's write returned (csv.writer's own contract)."""
        return self._writer.writerow([defused(cell) for cell in row])


def csv_writer(handle: Any) -> _DefusingWriter:
    """csv.writer for every CSV file we write: each cell `defused`, each cell quoted."""
    return _DefusingWriter(handle)


class UnusableFile(Exception):
    """The file cannot be processed at all; nothing was written."""


@contextmanager
def open_csv(path: Path) -> Iterator[TextIO]:
    """Open a CSV file to read. While it is read, a file that is not UTF-8 or not valid
    CSV raises UnusableFile."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            yield handle
    except UnicodeDecodeError as exc:
        raise UnusableFile(f"the file is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise UnusableFile(f"the file is not valid CSV: {exc}") from None


def minor_units_or_unusable(text: str, *, line: int, column: str = "amount") -> int | None:
    """A cell of a minor-units column: None when blank, else its int. Anything but ASCII
    digits (12.50, 1,234, -5, 1e3) is a sign that the whole file is in the wrong units, so
    it makes the file unusable rather than refusing one row (bulk_refund, import_charges)."""
    if not text:
        return None
    if not DIGITS.match(text):
        raise UnusableFile(
            f"line {line}: {column} {text[:30]!r} is not a whole number "
            "of minor units (cents; 1234 for $12.34)"
        )
    return int(text)
