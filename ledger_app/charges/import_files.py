"""Charge files as they are read for `import_charges`: this back office's own layout (`id,
amount, currency, status, description, created, amount_refunded`, amounts in minor units)
and Stripe's dashboard payments export (`--format stripe`: `id, Amount, Amount Refunded,
Currency, Status, ...`, amounts in major units). Reading makes sure a file is usable at all;
checking turns each row into a ChargeRow, or the error that refuses it. Nothing here
looks anything up or writes (services/imports.py does)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path

from ledger_app import errors
from ledger_app.charges.models import PAYMENT_INTENT_ID, Charge
from ledger_app.csv_files import DIGITS, UnusableFile, minor_units_or_unusable, open_csv
from ledger_app.money import (
    MAJOR_AMOUNT,
    normalize_currency,
    parse_major,
    validate_amount,
    validate_within_ceiling,
)
from ledger_app.text import has_control_characters, has_unstorable_characters
from ledger_app.validation import validate_email_address, validate_metadata, validate_text

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
    "paymentintent id",
    "customer email",
    "card last4",
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
    payment_intent: str = ""  # Stripe's PaymentIntent ID column; blank: none
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    receipt_email: str = ""  # where the customer's refund mails go (docs/customer-mails.md)
    card_last4: str = ""


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
    status = _stripe_status(values)
    currency = _stripe_currency(values["currency"])
    amount = validate_within_ceiling(_major(values["amount"], currency, "Amount"), currency)
    refunded = _stripe_refunded(values, amount, currency)
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
            payment_intent=_payment_intent(values.get("paymentintent id", "")),
            receipt_email=_email(values.get("customer email", "")),
            card_last4=card_last4(values.get("card last4", "")),
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


def _email(text: str) -> str:
    """The Customer Email column (where Stripe's receipts to the customer go): the
    address the refund mails go to, or none when it is not one the mails could go to. The
    charge comes in either way: an address never stops money being booked."""
    try:
        return validate_email_address(text.strip(), param="customer email")
    except errors.LedgerError:
        return ""


def card_last4(text: object) -> str:
    """Four digits, or nothing: what a charge keeps of its card."""
    value = text.strip() if isinstance(text, str) else ""
    return value if len(value) == 4 and value.isascii() and value.isdigit() else ""


def _stripe_status(values: dict[str, str]) -> str:
    """The charge's status for Stripe's Status (and Captured) column; Skipped for a payment
    that made no charge."""
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
    return status


def _stripe_currency(text: str) -> str:
    currency = normalize_currency(text)
    if currency in SCALES_DIFFER:
        raise errors.InvalidCurrency(
            f"{currency.upper()}: Stripe and this back office count its minor units "
            "differently, so its amounts cannot be converted safely; import it in our layout "
            "with amounts in Stripe's API units.",
            param="currency",
        )
    return currency


def _stripe_refunded(values: dict[str, str], amount: int, currency: str) -> int:
    """What was refunded before, from Amount Refunded, as Stripe's Status agrees with it:
    above 0 and below the Amount when partly refunded, the Amount when Refunded."""
    said = values["status"].lower()
    if not values["amount refunded"] and said != "refunded":
        # A blank cell says nothing: reading it as 0 would make a refunded payment
        # refundable again here.
        raise errors.InvalidAmount(
            "Amount Refunded is blank: say 0.00 when nothing was refunded.",
            param="amount_refunded",
        )
    refunded = _major(values["amount refunded"], currency, "Amount Refunded", zero=True)
    if said == "partially refunded" and not 0 < refunded < amount:
        raise errors.InvalidAmount(
            "Stripe status Partially refunded needs an Amount Refunded above 0 and below "
            f"the Amount; it says {values['amount refunded'][:30]}.",
            param="amount_refunded",
        )
    if said == "refunded":
        if values["amount refunded"] and refunded != amount:
            raise errors.InvalidAmount(
                f"Stripe status Refunded means refunded in full, but Amount Refunded "
                f"({values['amount refunded'][:30]}) is not the Amount ({values['amount'][:30]}).",
                param="amount_refunded",
            )
        refunded = amount
    return refunded


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


def _payment_intent(text: str) -> str:
    """Stripe's PaymentIntent ID cell: blank, or pi_ and letters, digits or underscores."""
    if text and not PAYMENT_INTENT_ID.fullmatch(text):
        raise errors.InvalidPaymentIntent(
            f"PaymentIntent ID {text[:70]!r} is not one: pi_ and up to 252 letters, digits or "
            "underscores.",
            param="payment_intent",
        )
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
