"""CSV files read by the batch commands (bulk_refund, import_charges): opening one safely,
and the one rule for minor-units columns. A file that breaks these is unusable as a whole,
and nothing is written from it."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

DIGITS = re.compile(r"^[0-9]{1,19}\Z")  # \Z, not $: "5\n" is not a number of minor units


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
