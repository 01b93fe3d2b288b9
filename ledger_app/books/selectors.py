"""The comparison of one day (UTC) of the ledger with the provider's balance transactions
(docs/operating/books.md). It reads; close_books (services) keeps what it finds.

What the ledger moved that day, each matched by the provider's id of its source:
- a refund made that day that moved money (it has a refund_succeeded entry; one made by
  a charge import is older than the books and left out): the provider's `refund` balance
  transaction of it, for minus its amount;
- a refund's failure after it succeeded (its refund_released entry that day): the
  `refund_failure` transaction, for its amount;
- a dispute's withdrawal (dispute_withdrawn, dispute_fee) or reinstatement
  (dispute_reinstated): the transaction the entries name, for minus the amount and the
  fee, or the amount.
Then each of the provider's transactions made that day (refunds, failures, adjustments,
charges; not its payouts) that no ledger movement accounts for.

A match for another amount, fee or currency is `amount_differs`; one that is not in a
payout is `waiting` until the day it is available on, `not_paid_out` after it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Exists, OuterRef

from ledger_app.books.models import BalanceTransaction, BooksDifference, Payout
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import known_to_the_provider_as
from ledger_app.ledger.models import LedgerEntry
from ledger_app.refunds.models import Refund

Kind = BooksDifference.Kind
Entry = LedgerEntry.Kind
# The provider's transactions the ledger accounts for (its payouts are the payouts' own).
ACCOUNTED = ("refund", "refund_failure", "adjustment", "charge")
UNPAID = ("failed", "canceled")  # a payout's statuses that paid nothing out


@dataclass(frozen=True)
class Found:
    """One difference, as close_books keeps it (a BooksDifference's fields)."""

    kind: str
    currency: str
    reference: str
    detail: str
    charge_id: str | None = None
    refund_id: str | None = None
    balance_transaction: str = ""
    ledger_amount: int | None = None
    provider_amount: int | None = None
    refunded: int = 0  # the refund value it holds back from `matched`


@dataclass
class Day:
    day: date
    refunded: Counter[str] = field(default_factory=Counter)
    matched: Counter[str] = field(default_factory=Counter)
    waiting: Counter[str] = field(default_factory=Counter)
    found: list[Found] = field(default_factory=list)
    # (refund id, its field, balance transaction id): what each matched refund shows
    links: list[tuple[str, str, str]] = field(default_factory=list)
    payouts: dict[str, str] = field(default_factory=dict)  # each payout's status


def bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), tzinfo=UTC)
    return start, start + timedelta(days=1)


def compare_day(day: date, today: date) -> Day:
    start, end = bounds(day)
    result = Day(day, payouts=dict(Payout.objects.values_list("id", "status")))
    matched_ids: set[str] = set()
    _refunds(result, start, end, today, matched_ids)
    _failures(result, start, end, today, matched_ids)
    _disputes(result, start, end, today, matched_ids)
    _unaccounted(result, start, end, matched_ids)
    return result


def _moved_money() -> Exists:
    return Exists(LedgerEntry.objects.filter(refund=OuterRef("pk"), kind=Entry.REFUND_SUCCEEDED))


def _by_source(sources: Iterable[str], kind: str) -> dict[str, BalanceTransaction]:
    """Each source's first transaction of `kind` (a second one is the provider's own)."""
    wanted = [source for source in sources if source]
    found = BalanceTransaction.objects.filter(type=kind, source__in=wanted)
    firsts: dict[str, BalanceTransaction] = {}
    for bt in found.order_by("-created", "-id"):  # the first of each written last
        firsts[bt.source] = bt
    return firsts


def _refunds(result: Day, start: datetime, end: datetime, today: date, ids: set[str]) -> None:
    refunds = list(
        Refund.objects.filter(created_at__gte=start, created_at__lt=end)
        .exclude(source=Refund.Source.IMPORT)
        .filter(_moved_money())
        .order_by("created_at", "pk")
    )
    for refund in refunds:
        result.refunded[refund.currency] += refund.amount
    _match_refunds(result, today, ids, refunds, failed=False)


def _failures(result: Day, start: datetime, end: datetime, today: date, ids: set[str]) -> None:
    released = LedgerEntry.objects.filter(
        kind=Entry.REFUND_RELEASED, created_at__gte=start, created_at__lt=end
    ).values("refund")
    refunds = list(Refund.objects.filter(pk__in=released).filter(_moved_money()).order_by("pk"))
    _match_refunds(result, today, ids, refunds, failed=True)


def _match_refunds(
    result: Day, today: date, ids: set[str], refunds: list[Refund], *, failed: bool
) -> None:
    """Each refund's money leaving (minus its amount, in its `refund` transaction), or,
    `failed`, coming back (its amount, in its `refund_failure` transaction)."""
    kind, field = ("refund_failure", "failure_") if failed else ("refund", "")
    provider = _by_source((r.provider_refund_id for r in refunds), kind)
    for refund in refunds:
        bt = provider.get(refund.provider_refund_id) if refund.provider_refund_id else None
        if bt is not None:
            result.links.append((refund.pk, f"{field}balance_transaction", bt.id))
        found = Found(
            kind="",
            currency=refund.currency,
            reference=f"refund {'failure ' if failed else ''}{refund.pk}",
            detail="",
            charge_id=refund.charge_id,
            refund_id=refund.pk,
            ledger_amount=refund.amount if failed else -refund.amount,
            refunded=0 if failed else refund.amount,
        )
        _match(result, today, ids, bt, found)


def _disputes(result: Day, start: datetime, end: datetime, today: date, ids: set[str]) -> None:
    entries = LedgerEntry.objects.filter(
        kind__in=[Entry.DISPUTE_WITHDRAWN, Entry.DISPUTE_FEE, Entry.DISPUTE_REINSTATED],
        created_at__gte=start,
        created_at__lt=end,
    ).order_by("pk")
    moved: dict[str, dict[str, LedgerEntry]] = {}
    for entry in entries:
        moved.setdefault(entry.balance_transaction, {})[entry.kind] = entry
    provider = {bt.id: bt for bt in BalanceTransaction.objects.filter(pk__in=list(moved))}
    for bt_id, kinds in moved.items():
        withdrawn = kinds.get(Entry.DISPUTE_WITHDRAWN)
        main = withdrawn or kinds.get(Entry.DISPUTE_REINSTATED) or next(iter(kinds.values()))
        fee = kinds.get(Entry.DISPUTE_FEE)
        amount = -withdrawn.amount if withdrawn else main.amount
        found = Found(
            kind="",
            currency=main.currency,
            reference=f"dispute {'withdrawal' if withdrawn else 'reinstatement'} {bt_id}",
            detail="",
            charge_id=main.charge_id,
            balance_transaction=bt_id,
            ledger_amount=amount,
        )
        _match(result, today, ids, provider.get(bt_id), found, fee=fee.amount if fee else 0)


def _match(
    result: Day,
    today: date,
    ids: set[str],
    bt: BalanceTransaction | None,
    ours: Found,
    *,
    fee: int | None = None,
) -> None:
    """Compare one ledger movement with its balance transaction (None: none found)."""
    if bt is None:
        result.found.append(
            _as(ours, Kind.MISSING_AT_PROVIDER, "the provider lists no balance transaction of it")
        )
        return
    ids.add(bt.id)
    ours = _with_provider(ours, bt)
    if (
        bt.currency != ours.currency
        or bt.amount != ours.ledger_amount
        or (fee is not None and bt.fee != fee)
    ):
        said = f"{bt.amount} {bt.currency} (fee {bt.fee})"
        ledger = f"{ours.ledger_amount} {ours.currency}" + (
            f" (fee {fee})" if fee is not None else ""
        )
        result.found.append(_as(ours, Kind.AMOUNT_DIFFERS, f"ledger {ledger}, provider {said}"))
        return
    paid = result.payouts.get(bt.payout) if bt.payout else None
    if paid in UNPAID:
        result.found.append(_as(ours, Kind.NOT_PAID_OUT, f"its payout {bt.payout} {paid}"))
        return
    if paid != "paid":  # in no payout yet, or in one on its way
        available = bt.available_on.astimezone(UTC).date()
        if bt.payout or available >= today:
            result.waiting[ours.currency] += 1
            return
        result.found.append(
            _as(ours, Kind.NOT_PAID_OUT, f"available on {available}, in no payout since")
        )
        return
    result.matched[ours.currency] += ours.refunded


def _unaccounted(result: Day, start: datetime, end: datetime, ids: set[str]) -> None:
    """The provider's transactions of the day that no ledger movement accounts for."""
    made = BalanceTransaction.objects.filter(
        created__gte=start, created__lt=end, type__in=ACCOUNTED
    ).exclude(pk__in=ids)
    for bt in made.order_by("created", "pk"):
        if _accounted_for(bt):
            continue
        result.found.append(
            Found(
                kind=Kind.MISSING_IN_LEDGER,
                currency=bt.currency,
                reference=f"balance transaction {bt.id}",
                detail=f"{bt.type} of {bt.amount} {bt.currency} ({bt.source or 'no source'})"
                " that the ledger never made",
                balance_transaction=bt.id,
                provider_amount=bt.amount,
                charge_id=_charge_of(bt),
            )
        )


def _accounted_for(bt: BalanceTransaction) -> bool:
    """Whether a ledger movement accounts for exactly this transaction (a refund's:
    _refund_of; a dispute's entries that name it); a refund that never succeeded, for the provider's
    pair of its debit and its return, which net to nothing; a charge, for the one
    transaction of a succeeded charge the ledger holds for that amount."""
    if bt.type in ("refund", "refund_failure"):
        return _refund_of(bt) or _came_back(bt)
    if bt.type == "adjustment":
        return LedgerEntry.objects.filter(balance_transaction=bt.id).exists()
    if bt.type == "charge" and bt.source:
        charge = Charge.objects.filter(known_to_the_provider_as(bt.source)).first()
        once = BalanceTransaction.objects.filter(type="charge", source=bt.source).count() == 1
        same = charge is not None and (charge.amount, charge.currency) == (bt.amount, bt.currency)
        return same and once and charge is not None and charge.status == Charge.Status.SUCCEEDED
    return False


def _refund_of(bt: BalanceTransaction) -> bool:
    """A refund's money leaving (or, for a refund_failure, coming back) that a ledger
    refund accounts for: the one matched to it on the refund's day; or, while none is, the
    first such transaction of a refund that moved money (one made the day before, or
    before the books began, whose day does not match it here). A second one is not."""
    field = "failure_balance_transaction" if bt.type == "refund_failure" else "balance_transaction"
    if Refund.objects.filter(**{field: bt.id}).exists():
        return True
    if not bt.source or _by_source([bt.source], bt.type)[bt.source].id != bt.id:
        return False
    refunds = Refund.objects.filter(provider_refund_id=bt.source, **{field: ""})
    if bt.type == "refund_failure":
        refunds = refunds.filter(ledger_entries__kind=Entry.REFUND_RELEASED)
    return refunds.filter(_moved_money()).exists()


def _came_back(bt: BalanceTransaction) -> bool:
    """A refund the ledger holds as failed without ever succeeding (pending at the
    provider, then failed): the provider's one debit and one return of it net to nothing."""
    if not bt.source:
        return False
    failed = Refund.objects.filter(provider_refund_id=bt.source, status=Refund.Status.FAILED)
    if not failed.exclude(_moved_money()).exists():
        return False
    pair = list(
        BalanceTransaction.objects.filter(
            source=bt.source, type__in=["refund", "refund_failure"]
        ).values_list("type", "amount")
    )
    return sorted(kind for kind, _ in pair) == ["refund", "refund_failure"] and (
        sum(amount for _, amount in pair) == 0
    )


def _charge_of(bt: BalanceTransaction) -> str | None:
    if bt.type != "charge" or not bt.source:
        return None
    return (
        Charge.objects.filter(known_to_the_provider_as(bt.source))
        .values_list("pk", flat=True)
        .first()
    )


def _as(found: Found, kind: str, detail: str) -> Found:
    return Found(**{**found.__dict__, "kind": kind, "detail": detail})


def _with_provider(found: Found, bt: BalanceTransaction) -> Found:
    return Found(**{**found.__dict__, "balance_transaction": bt.id, "provider_amount": bt.amount})
