"""Importing charges exported from a provider: idempotent by charge id, never rewriting one.

Two layouts: this back office's own (`id, amount, currency, status, description, created,
amount_refunded`, amounts in minor units) and Stripe's dashboard payments export
(`--format stripe`: `id, Amount, Amount Refunded, Currency, Status, ...`, amounts in major
units). A charge the provider had already refunded, in part or in full, comes in with a
`succeeded` refund of that amount (source `import`), written with the charge in one
transaction with its ledger entries, so only the rest can be refunded here. A final
refund is never sent to the provider. The file is read twice, streaming: once to make sure
it is usable at all (nothing is written if it is not), once to import. Reading and checking
the two layouts is charges/import_files.py's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import Sum

from ledger_app import errors
from ledger_app.charges.import_files import (
    ChargeRow,
    Format,
    Header,
    Skipped,
    native_row,
    read_import_rows,
    stripe_row,
)
from ledger_app.charges.models import Charge
from ledger_app.charges.services import book_refund_made_at_provider, write_recorded
from ledger_app.csv_files import UnusableFile
from ledger_app.refunds.models import Refund, new_refund_id

ACTOR = "import_charges"
REFUNDED_BEFORE_NOTE = (
    "Refunded at the provider before this charge was imported (import_charges); never sent "
    "from here."
)


class Outcome(StrEnum):
    """How a row ended."""

    IMPORTED = "imported"
    EXISTS = "exists"  # stored already, with what the file says; nothing changed
    SKIPPED = "skipped"  # a Stripe payment that made no charge
    REFUSED = "refused"
    WOULD_IMPORT = "would_import"  # a dry run
    WOULD_EXIST = "would_exist"


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
        charge = write_recorded(row, ACTOR)
        if row.refunded_before:
            _record_refunded_before(charge, row.refunded_before)
    return charge


def _record_refunded_before(charge: Charge, amount: int) -> Refund:
    """The refund the provider made before the import: final (succeeded), so no sender ever
    takes it; reserved and settled in the ledger at once, as a refund made here would be."""
    refund_id = new_refund_id()
    refund = Refund(
        id=refund_id,
        charge=charge,
        amount=amount,
        currency=charge.currency,
        status=Refund.Status.SUCCEEDED,
        note=REFUNDED_BEFORE_NOTE,
        source=Refund.Source.IMPORT,
        actor=ACTOR,
        payment_intent=charge.payment_intent,
        provider_idempotency_key=f"refund:{refund_id}",
        # When it was made is unknown; dated with its charge, not today, so the admin's
        # figures of today's refunds never count a year of imported history.
        created_at=charge.created_at,
    )
    return book_refund_made_at_provider(refund, memo="refunded at the provider before import")
