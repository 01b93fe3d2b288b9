"""Importing charges exported from a provider: idempotent by charge id, never rewriting one."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.db import IntegrityError

from ledger_app import errors
from ledger_app.models import Charge
from ledger_app.money import normalize_currency, validate_amount, validate_within_ceiling
from ledger_app.services.bulk import DIGITS, UnusableFile, open_csv
from ledger_app.services.charges import record_charge
from ledger_app.services.text import has_unstorable_characters
from ledger_app.services.validation import validate_text

COLUMNS = ["id", "amount", "currency", "status", "description", "created"]
REQUIRED = {"id", "amount", "currency", "status"}
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ImportRow:
    line: int
    values: dict[str, str]


def read_charge_rows(path: Path) -> Iterator[ImportRow]:
    """Stream the file's rows, raising UnusableFile for what makes the whole file unusable:
    not UTF-8 or not CSV, no header or missing or unknown columns, a row with another
    number of fields than the header."""
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        header = [name.strip().lower() for name in (reader.fieldnames or [])]
        if not header:
            raise UnusableFile("the file is empty")
        missing, unknown = REQUIRED - set(header), set(header) - set(COLUMNS)
        if missing or unknown:
            raise UnusableFile(
                f"the header must name the columns {COLUMNS} (id, amount, currency and "
                f"status required); missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        reader.fieldnames = header
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise UnusableFile(f"line {reader.line_num}: wrong number of fields")
            yield ImportRow(reader.line_num, {k: v.strip() for k, v in row.items()})


def _created(text: str) -> datetime | None:
    if not text:
        return None
    try:
        if DIGITS.match(text):
            return datetime.fromtimestamp(int(text), tz=UTC)
        moment = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise errors.InvalidCreated() from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if not EARLIEST <= moment <= LATEST:  # outside this, some databases cannot read it back
        raise errors.InvalidCreated("created must be between 1970 and 2100.")
    return moment


def import_charge(values: dict[str, str]) -> str:
    """'imported' or 'exists'; raises a LedgerError for a row it refuses. The id, amount
    and currency are checked before the row is looked up, so an amount above its
    currency's ceiling (`amount_too_large`) is refused whether or not the charge is
    already stored."""
    charge_id = values["id"]
    if not 0 < len(charge_id) <= 64 or has_unstorable_characters(charge_id):
        raise errors.ResourceMissing("The id must be 1 to 64 characters.", param="id")
    if not DIGITS.match(values["amount"]):
        raise errors.InvalidAmount(
            f"{values['amount'][:30]!r} is not a whole number of minor units."
        )
    amount, currency = int(values["amount"]), normalize_currency(values["currency"])
    validate_within_ceiling(validate_amount(amount), currency)
    existing = Charge.objects.filter(pk=charge_id).first()
    if existing is None:
        try:
            record_charge(
                charge_id=charge_id,
                amount=amount,
                currency=currency,
                status=values["status"],
                description=validate_text(values.get("description", ""), errors.InvalidDescription),
                created_at=_created(values.get("created", "")),
                actor="import_charges",
            )
            return "imported"
        except IntegrityError:  # imported by someone else a moment ago
            existing = Charge.objects.get(pk=charge_id)
    if (existing.amount, existing.currency) != (amount, currency):
        raise errors.ImportConflict(
            f"Charge {charge_id} exists as {existing.amount} {existing.currency}; the file "
            f"says {amount} {currency}. Existing charges are never changed."
        )
    return "exists"
