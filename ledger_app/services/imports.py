"""Importing charges exported from a provider: idempotent by charge id, never rewriting one.

Two layouts: this back office's own (`id, amount, currency, status, description, created,
amount_refunded`, amounts in minor units) and Stripe's dashboard payments export
(`--format stripe`: `id, Amount, Amount Refunded, Currency, Status, ...`, amounts in major
units). A charge the provider had already refunded, in part or in full, comes in with a
`succeeded` refund of that amount (source `import`), written with the charge in one
transaction with its ledger entries, so only the rest can be refunded here. A final
refund is never sent to the provider. The file is read twice, streaming: once to make sure
it is usable at all (nothing is written if it is not), once to import.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from ledger_app import errors
from ledger_app.models import Charge, EventType, LedgerEntry, Refund, new_refund_id
from ledger_app.money import (
    MAJOR_AMOUNT,
    normalize_currency,
    parse_major,
    validate_amount,
    validate_within_ceiling,
)
from ledger_app.services import events
from ledger_app.services.csv_files import DIGITS, UnusableFile, minor_units_or_unusable, open_csv
from ledger_app.services.ledger import append_entry
from ledger_app.services.validation import validate_metadata, validate_text
from ledger_app.text import has_control_characters, has_unstorable_characters

ACTOR = "import_charges"
REFUNDED_BEFORE_NOTE = (
    "Refunded at the provider before this charge was imported (import_charges); never sent "
    "from here."
)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
# The statuses a charge can be imported with (a charge is never awaiting approval or canceled).
IMPORTABLE_STATUSES = (
    Charge.Status.PENDING,
    Charge.Status.SUCCEEDED,
    Charge.Status.FAILED,
    Charge.Status.UNKNOWN,
)


class Format(StrEnum):
    NATIVE = "native"  # this back office's columns, amounts in minor units
    STRIPE = "stripe"  # Stripe's dashboard payments export, amounts in major units


# Header names as they are compared: stripped and lower-cased.
NATIVE_COLUMNS = ("id", "amount", "currency", "status", "description", "created", "amount_refunded")
NATIVE_REQUIRED = ("id", "amount", "currency", "status")
NATIVE_MINOR_UNITS = ("amount", "amount_refunded")
STRIPE_CREATED = ("created date (utc)", "created (utc)")  # newer and older exports
STRIPE_COLUMNS = (
    "id",
    "amount",
    "amount refunded",
    "currency",
    "status",
    "captured",
    "description",
    "customer id",
    *STRIPE_CREATED,
)
# Without Amount Refunded a partly refunded payment (Status still "Paid") would come in
# fully refundable, so the export must have it.
STRIPE_REQUIRED = ("id", "amount", "amount refunded", "currency", "status")
STRIPE_METADATA = " (metadata)"  # `order_id (metadata)`: the charge's metadata key order_id
# Stripe's Status column, lower-cased, and the status a charge gets here.
STRIPE_STATUSES = {
    "paid": Charge.Status.SUCCEEDED,
    "succeeded": Charge.Status.SUCCEEDED,
    "partially refunded": Charge.Status.SUCCEEDED,
    "refunded": Charge.Status.SUCCEEDED,  # in full: Amount Refunded is the Amount
    "failed": Charge.Status.FAILED,
    "blocked": Charge.Status.FAILED,  # Radar blocked it: a failed charge in Stripe's API
}
# Payments that never made a charge: nothing to import and nothing to refund, so skipped.
STRIPE_NO_CHARGE = ("canceled", "incomplete")

# Currencies whose minor unit Babel (which this back office uses) and Stripe's API
# count differently (Stripe: two decimals for HUF, ISK, IDR, COP, UGX in its API).
SCALES_DIFFER = frozenset({"huf", "isk", "idr", "cop", "ugx"})


class Outcome(StrEnum):
    """How a row ended."""

    IMPORTED = "imported"
    EXISTS = "exists"  # stored already, with what the file says; nothing changed
    SKIPPED = "skipped"  # a Stripe payment that made no charge
    REFUSED = "refused"
    WOULD_IMPORT = "would_import"  # a dry run
    WOULD_EXIST = "would_exist"


@dataclass(frozen=True)
class ChargeRow:
    """One row, checked, before anything is looked up or written."""

    charge_id: str
    amount: int
    currency: str
    status: str
    # Refunded at the provider before the import; None when the file does not say.
    refunded_before: int | None = None
    description: str = ""
    customer: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True)
class ImportRowResult:
    line: int
    outcome: Outcome
    charge_id: str = ""
    refunded_before: int = 0  # the refund it brought (or would bring) in with the charge
    code: str = ""
    message: str = ""


@dataclass
class ImportSummary:
    rows: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    refused_by_code: Counter[str] = field(default_factory=Counter)
    skipped_statuses: Counter[str] = field(default_factory=Counter)  # Stripe's words, as written
    with_refund: int = 0  # charges imported (or that would be) with their provider refund
    ignored_columns: list[str] = field(default_factory=list)  # as the header wrote them

    def add(self, result: ImportRowResult) -> None:
        self.rows += 1
        self.outcomes[result.outcome] += 1
        if result.outcome == Outcome.REFUSED:
            self.refused_by_code[result.code] += 1
        elif result.outcome == Outcome.SKIPPED:
            self.skipped_statuses[result.message] += 1
        elif result.refunded_before:
            self.with_refund += 1

    @property
    def refused(self) -> int:
        return self.outcomes[Outcome.REFUSED]


class Skipped(Exception):
    """A row that is not a charge (Stripe's Canceled, Incomplete); its status as written."""


# Reading


@dataclass(frozen=True)
class Header:
    columns: list[str]  # compared names, in file order ("" for a column not used)
    ignored: list[str]  # columns not used, as the file names them


def read_import_rows(
    path: Path, fmt: Format
) -> tuple[Header, Iterator[tuple[int, dict[str, str]]]]:
    """The header and an iterator of (line, values by compared column name) for every row
    that is not blank; raises UnusableFile for what makes the whole file unusable: not
    UTF-8 or not CSV, no header, required columns missing or named twice, a row with
    another number of fields than the header, and (our layout) an amount that is not a
    whole number of minor units, a sign that the file is in the wrong units."""
    with open_csv(path) as handle:
        header = _header(next(csv.reader(handle), None), fmt)

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        with open_csv(path) as handle:
            reader = csv.reader(handle)
            next(reader, None)
            for values in reader:
                if not any(v.strip() for v in values):
                    continue  # blank line
                if len(values) != len(header.columns):
                    raise UnusableFile(
                        f"line {reader.line_num}: {len(values)} fields, the header has "
                        f"{len(header.columns)}"
                    )
                row = {
                    name: value.strip()
                    for name, value in zip(header.columns, values, strict=True)
                    if name
                }
                if fmt == Format.NATIVE:
                    for column in NATIVE_MINOR_UNITS:
                        _minor_units(row.get(column, ""), reader.line_num, column, header)
                yield reader.line_num, row

    return header, rows()


def _header(names: list[str] | None, fmt: Format) -> Header:
    if names is None:
        raise UnusableFile("the file is empty")
    known, required = (
        (NATIVE_COLUMNS, NATIVE_REQUIRED)
        if fmt == Format.NATIVE
        else (STRIPE_COLUMNS, STRIPE_REQUIRED)
    )
    columns: list[str] = []
    ignored: list[str] = []
    for name in names:
        compared = name.strip().lower()
        metadata = fmt == Format.STRIPE and compared.endswith(STRIPE_METADATA)
        if compared in known:
            columns.append(compared)
        elif metadata and name.strip()[: -len(STRIPE_METADATA)].strip():
            columns.append(f"metadata:{name.strip()[: -len(STRIPE_METADATA)].strip()}")
        else:
            columns.append("")
            if name.strip():  # a nameless column (a trailing comma) is not worth naming
                ignored.append(name.strip())
    missing = [name for name in required if name not in columns]
    twice = sorted({name for name in columns if name and columns.count(name) > 1})
    if missing or twice:
        hint = ""
        if fmt == Format.NATIVE and "amount refunded" in [n.strip().lower() for n in names]:
            hint = "; this looks like a Stripe payments export: add --format stripe"
        raise UnusableFile(
            f"the header must name the columns {', '.join(required)} (once each, in any "
            "case); "
            f"missing: {', '.join(missing) or 'none'}, named twice: {', '.join(twice) or 'none'}"
            + hint
        )
    return Header(columns, ignored)


def _minor_units(text: str, line: int, column: str, header: Header) -> int | None:
    try:
        return minor_units_or_unusable(text, line=line, column=column)
    except UnusableFile as exc:
        if "." in text and "amount refunded" in (n.lower() for n in header.ignored):
            raise UnusableFile(
                f"{exc}; this looks like a Stripe export: add --format stripe"
            ) from None
        raise


# Checking one row


def native_row(values: dict[str, str]) -> ChargeRow:
    """A row of our layout, checked; raises the LedgerError that refuses it. Its amounts
    are whole numbers of minor units or blank (read_import_rows made sure)."""
    charge_id = _charge_id(values["id"])
    given = values["amount"]
    if not given:
        raise errors.InvalidAmount("amount is required (a whole number of minor units).")
    currency = normalize_currency(values["currency"])
    amount = validate_within_ceiling(validate_amount(int(given)), currency)
    status = values["status"]
    if status not in IMPORTABLE_STATUSES:
        raise errors.InvalidChargeStatus()
    refunded = values.get("amount_refunded", "")
    return _checked(
        ChargeRow(
            charge_id=charge_id,
            amount=amount,
            currency=currency,
            status=status,
            refunded_before=int(refunded) if refunded else None,
            description=validate_text(values.get("description", ""), errors.InvalidDescription),
            created_at=_created(values.get("created", "")),
        )
    )


def stripe_row(values: dict[str, str]) -> ChargeRow:
    """A row of Stripe's payments export, checked; raises the LedgerError that refuses it,
    or Skipped for a payment that made no charge. Amounts are major units, converted
    exactly by the currency's exponent (JPY 0 decimals, USD 2, KWD 3): more decimals than
    the currency has is `invalid_amount`, never a rounding."""
    charge_id = _charge_id(values["id"])
    said = values["status"]
    if said.lower() in STRIPE_NO_CHARGE:
        raise Skipped(said)
    status = STRIPE_STATUSES.get(said.lower())
    if status is None:
        raise errors.InvalidChargeStatus(
            f"Stripe status {said[:40]!r} is not one a charge is imported with (Paid, "
            "Refunded, Failed, Blocked); import the payment once it has ended as one of them."
        )
    if status == Charge.Status.SUCCEEDED and values.get("captured", "").lower() == "false":
        raise errors.InvalidChargeStatus(
            f"Stripe says {said} but not captured: an authorization, not a charge. Capture "
            "or cancel it at Stripe, then import it."
        )
    currency = normalize_currency(values["currency"])
    if currency in SCALES_DIFFER:
        raise errors.InvalidCurrency(
            f"{currency.upper()}: Stripe and this back office count its minor units "
            "differently, so its amounts cannot be converted safely; import it in our layout "
            "with amounts in Stripe's API units.",
            param="currency",
        )
    amount = validate_within_ceiling(_major(values["amount"], currency, "Amount"), currency)
    if not values["amount refunded"] and said.lower() != "refunded":
        # A blank cell says nothing: reading it as 0 would make a refunded payment
        # refundable again here.
        raise errors.InvalidAmount(
            "Amount Refunded is blank: say 0.00 when nothing was refunded.",
            param="amount_refunded",
        )
    refunded = _major(values["amount refunded"], currency, "Amount Refunded", zero=True)
    if said.lower() == "partially refunded" and not 0 < refunded < amount:
        raise errors.InvalidAmount(
            "Stripe status Partially refunded needs an Amount Refunded above 0 and below "
            f"the Amount; it says {values['amount refunded'][:30]}.",
            param="amount_refunded",
        )
    if said.lower() == "refunded":
        if values["amount refunded"] and refunded != amount:
            raise errors.InvalidAmount(
                f"Stripe status Refunded means refunded in full, but Amount Refunded "
                f"({values['amount refunded'][:30]}) is not the Amount ({values['amount'][:30]}).",
                param="amount_refunded",
            )
        refunded = amount
    created = next((values[c] for c in STRIPE_CREATED if values.get(c)), "")
    return _checked(
        ChargeRow(
            charge_id=charge_id,
            amount=amount,
            currency=currency,
            status=status,
            refunded_before=refunded,
            description=validate_text(values.get("description", ""), errors.InvalidDescription),
            customer=_customer(values.get("customer id", "")),
            metadata=validate_metadata(
                {
                    name.removeprefix("metadata:"): value
                    for name, value in values.items()
                    if name.startswith("metadata:") and value
                }
            ),
            created_at=_created(created),
        )
    )


def _checked(row: ChargeRow) -> ChargeRow:
    """The checks across columns: what was refunded lies within the amount, and only a
    succeeded charge can have been refunded."""
    refunded = row.refunded_before or 0
    if refunded > row.amount:
        raise errors.InvalidAmount(
            f"amount_refunded ({refunded}) is more than the charge's amount ({row.amount}).",
            param="amount_refunded",
        )
    if refunded and row.status != Charge.Status.SUCCEEDED:
        raise errors.InvalidAmount(
            f"A {row.status} charge cannot have been refunded; amount_refunded must be 0.",
            param="amount_refunded",
        )
    return row


def _charge_id(text: str) -> str:
    if not 0 < len(text) <= 64 or has_unstorable_characters(text):
        raise errors.ResourceMissing("The id must be 1 to 64 characters.", param="id")
    return text


def _customer(text: str) -> str:
    if len(text) > 255 or has_control_characters(text):
        raise errors.InvalidCustomer()
    return text


def _major(text: str, currency: str, column: str, *, zero: bool = False) -> int:
    """Exact minor units from a major-units cell ("1,234.50" usd -> 123450); blank and
    zero are 0 where `zero` allows them."""
    if zero and (not text or (MAJOR_AMOUNT.match(text) and not Decimal(text.replace(",", "")))):
        return 0
    try:
        return parse_major(text, currency)
    except errors.InvalidAmount as exc:
        param = column.lower().replace(" ", "_")
        raise errors.InvalidAmount(f"{column}: {exc.message}", param=param) from None


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


# Importing


def check_import_file(path: Path, fmt: Format) -> tuple[int, Header]:
    """Read the whole file once without writing: its number of rows and its header, or
    UnusableFile."""
    header, rows = read_import_rows(path, fmt)
    count = sum(1 for _ in rows)
    if count == 0:
        raise UnusableFile("the file has a header but no rows")
    return count, header


def run_import(
    path: Path,
    *,
    fmt: Format = Format.NATIVE,
    dry_run: bool = False,
    on_start: Callable[[int], None] = lambda rows: None,
    on_row: Callable[[ImportRowResult], None] = lambda result: None,
) -> ImportSummary:
    """Import every row of the file (a dry run: decide each the same way, write nothing).
    Raises UnusableFile, having written nothing, when the file is unusable; a row that is
    refused is reported and the others go on.

    A charge not stored yet is written with its `charge_succeeded` entry and, when the
    provider had refunded some of it (`amount_refunded`, Stripe's Amount Refunded), one
    succeeded refund of that amount from the source `import` with its `refund_reserved` and
    `refund_succeeded` entries, all in one transaction. A charge already stored is left as
    it is: `exists` when the file says the same amount and currency (and, when it says one,
    the same amount refunded before import as the import recorded), else `import_conflict`.
    """
    rows, header = check_import_file(path, fmt)
    on_start(rows)
    summary = ImportSummary(ignored_columns=header.ignored)
    check_row = native_row if fmt == Format.NATIVE else stripe_row
    planned: dict[str, ChargeRow] = {}  # a dry run's charges, as if imported
    for line, values in read_import_rows(path, fmt)[1]:
        try:
            row = check_row(values)
            outcome = _import_row(row, dry_run=dry_run, planned=planned)
            refunded = (row.refunded_before or 0) if outcome in _NEW else 0
            result = ImportRowResult(line, outcome, row.charge_id, refunded_before=refunded)
        except Skipped as skipped:
            result = ImportRowResult(line, Outcome.SKIPPED, values["id"], message=str(skipped))
        except errors.LedgerError as exc:
            result = ImportRowResult(
                line, Outcome.REFUSED, values["id"], code=exc.code, message=exc.message
            )
        summary.add(result)
        on_row(result)
    return summary


_NEW = (Outcome.IMPORTED, Outcome.WOULD_IMPORT)


def _import_row(row: ChargeRow, *, dry_run: bool, planned: dict[str, ChargeRow]) -> Outcome:
    stored = _stored_terms(row.charge_id)
    if stored is None and row.charge_id in planned:
        earlier = planned[row.charge_id]
        stored = (earlier.amount, earlier.currency, earlier.refunded_before or 0)
    if stored is None:
        if dry_run:
            planned[row.charge_id] = row
            return Outcome.WOULD_IMPORT
        try:
            _create_imported_charge(row)
            return Outcome.IMPORTED
        except IntegrityError:  # imported by someone else a moment ago
            stored = _stored_terms(row.charge_id)
            if stored is None:
                raise
    _ensure_same(row, *stored)
    return Outcome.WOULD_EXIST if dry_run else Outcome.EXISTS


def _stored_terms(charge_id: str) -> tuple[int, str, int] | None:
    """A stored charge's amount, currency and what an import recorded as refunded before
    it; None if there is no such charge."""
    charge = Charge.objects.filter(pk=charge_id).values_list("amount", "currency").first()
    if charge is None:
        return None
    imported = Refund.objects.filter(charge_id=charge_id, source=Refund.Source.IMPORT)
    return (*charge, imported.aggregate(total=Sum("amount"))["total"] or 0)


def _ensure_same(row: ChargeRow, amount: int, currency: str, refunded_before: int) -> None:
    if (amount, currency) != (row.amount, row.currency):
        raise errors.ImportConflict(
            f"Charge {row.charge_id} exists as {amount} {currency}; the file says "
            f"{row.amount} {row.currency}. Existing charges are never changed."
        )
    if row.refunded_before is not None and row.refunded_before != refunded_before:
        raise errors.ImportConflict(
            f"Charge {row.charge_id} was imported with {refunded_before} refunded at the "
            f"provider before import; the file says {row.refunded_before}. Existing charges "
            "are never changed: refund more through the back office (refund, bulk_refund)."
        )


def _create_imported_charge(row: ChargeRow) -> Charge:
    """Write the charge as the provider has it, in one transaction: the charge, its
    `charge_succeeded` entry, and its refund made at the provider with that refund's
    entries, and the events of each. Nothing is sent to the provider."""
    with transaction.atomic(durable=True):
        charge = Charge.objects.create(
            id=row.charge_id,
            amount=row.amount,
            currency=row.currency,
            status=row.status,
            description=row.description,
            customer=row.customer,
            metadata=row.metadata,
            created_at=row.created_at or timezone.now(),
        )
        if row.status == Charge.Status.SUCCEEDED:
            append_entry(
                charge=charge,
                kind=LedgerEntry.Kind.CHARGE_SUCCEEDED,
                amount=row.amount,
                actor=ACTOR,
            )
            events.record(EventType.CHARGE_SUCCEEDED, charge)
        elif row.status == Charge.Status.FAILED:
            events.record(EventType.CHARGE_FAILED, charge)
        if row.refunded_before:
            _record_refunded_before(charge, row.refunded_before)
    return charge


def _record_refunded_before(charge: Charge, amount: int) -> Refund:
    """The refund the provider made before the import: final (succeeded), so no sender ever
    takes it; reserved and settled in the ledger at once, as a refund made here would be."""
    refund_id = new_refund_id()
    refund = Refund.objects.create(
        id=refund_id,
        charge=charge,
        amount=amount,
        currency=charge.currency,
        status=Refund.Status.SUCCEEDED,
        note=REFUNDED_BEFORE_NOTE,
        source=Refund.Source.IMPORT,
        actor=ACTOR,
        provider_idempotency_key=f"refund:{refund_id}",
        # When it was made is unknown; dated with its charge, not today, so the admin's
        # figures of today's refunds never count a year of imported history.
        created_at=charge.created_at,
    )
    for kind in (LedgerEntry.Kind.REFUND_RESERVED, LedgerEntry.Kind.REFUND_SUCCEEDED):
        append_entry(
            charge=charge,
            refund=refund,
            kind=kind,
            amount=amount,
            actor=ACTOR,
            memo="refunded at the provider before import",
        )
    moved = {"amount_refunded": charge.amount_refunded}
    charge.amount_refunded = amount
    if charge.refunded:
        moved["refunded"] = False
    charge.save(update_fields=["amount_refunded", "updated_at"])
    events.record_many(
        [(EventType.REFUND_CREATED, refund, None), (EventType.CHARGE_REFUNDED, charge, moved)]
    )
    return refund
