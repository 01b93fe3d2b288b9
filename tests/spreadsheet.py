"""Reading a CSV file we wrote as a spreadsheet would, to check that no cell of it runs as
a formula (services/csv_files.py: csv_writer); the cells an attacker would try; and an
admin export's rows as a person downloads them."""

from __future__ import annotations

import csv
import io
import re

# Cells that run as a formula somewhere if written as they are (issue 44, finding 8).
HOSTILE_CELLS = [
    "=cmd|' /C calc'!A0",
    "x;=cmd|' /C calc'!A0",  # a spreadsheet set to `;` splits it, and runs the second half
    "x; =cmd|' /C calc'!A0",
    "x;\"=cmd|' /C calc'!A0",
    "＝cmd|' /C calc'!A0",  # full-width forms
    "＋1+1",
    "－1+1",
    "＠SUM(A1)",
    "﹦1+1",  # small form
    " =1+1",  # space-led
    "   @SUM(A1)",
    "\u3000=1+1",  # an ideographic space
    "\t=1+1",  # tab- and CR-led
    "\r=1+1",
    "\tcmd",
    "\rcmd",
    "x\n=1+1",  # a line break, where a reader that lost its quotes starts a row
    "x\r\n+1+1",
    "a\t-1+1",  # a reader set to tabs
    '"=1+1',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    '=HYPERLINK("http://x")',
]
SEPARATORS = (",", ";", "\t")
# What starts a formula, ASCII, full-width and small forms (kept apart from the code's own).
FORMULA_STARTS = "=+-@＝＋－＠﹦﹢﹣﹫"
_LEADING = re.compile(r'^[\s"]*')


def read_as_spreadsheet(text: str, separator: str) -> list[list[str]]:
    """The rows of `text` (a byte order mark dropped) as a spreadsheet set to `separator`
    reads them: quotes honoured where a cell starts with one, taken as they are elsewhere
    (csv's lenient reading, as spreadsheets are lenient)."""
    body = io.StringIO(text.removeprefix("\ufeff"), newline="")
    return list(csv.reader(body, delimiter=separator, strict=False))


def runs_as_formula(cell: str) -> bool:
    """Whether a spreadsheet might run this cell: it starts with a formula start past any
    spaces and quotes (some trim them). A cell that starts with an apostrophe is text. A
    negative whole number (an amount we wrote) is a number, not a formula."""
    rest = _LEADING.sub("", cell)
    if re.match(r"-[0-9]+(?:$|[\",])", rest):
        return False
    return (rest != "" and rest[0] in FORMULA_STARTS) or cell[:1] in ("\t", "\r")


def formulas_in(text: str) -> dict[str, list[str]]:
    """Every cell that would run, by the separator the spreadsheet is set to."""
    return {
        separator: [
            cell
            for row in read_as_spreadsheet(text, separator)
            for cell in row
            if runs_as_formula(cell)
        ]
        for separator in SEPARATORS
    }


NO_FORMULAS: dict[str, list[str]] = {separator: [] for separator in SEPARATORS}


def rows_of(response) -> list[dict[str, str]]:
    """The CSV a person downloads, read as a spreadsheet reads it (UTF-8, BOM first)."""
    assert response.status_code == 200, response.content[:300]
    body = b"".join(response.streaming_content).decode("utf-8")
    assert body.startswith("\ufeff")
    return list(csv.DictReader(io.StringIO(body.removeprefix("\ufeff"), newline="")))


def header_of(response) -> list[str]:
    body = b"".join(response.streaming_content).decode("utf-8").removeprefix("\ufeff")
    return next(csv.reader(io.StringIO(body)))
