"""Keeping the provider's balance transactions and payouts, and closing the books day by
day against them (docs/operating/books.md).

`close_books` compares each day (books.selectors.compare_day) and keeps what it found: a
BooksDay per day and currency (the value refunded, the part matched and paid out or
explained, the unexplained differences by kind, the status) and a BooksDifference per
difference. A difference a later close no longer finds is dropped, or, once a lead
explained it, kept as history. A day is `closed` when every difference of it is explained
and nothing waits for a payout; `waiting` while matched transactions wait for their payout
day; `open` while a difference is unexplained.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Min
from django.utils import timezone

from ledger_app import errors
from ledger_app.books.models import BalanceTransaction, BooksDay, BooksDifference, Payout
from ledger_app.books.selectors import Day, Found, bounds, compare_day
from ledger_app.operations import job_leases
from ledger_app.refunds.models import Refund
from ledger_app.text import has_unstorable_characters

Status = BooksDay.Status
JOB = "close_books"
LEASE_SECONDS = 600  # renewed with every day closed
# A closed day this old is closed again only when the provider lists something new of it.
SETTLED = timedelta(days=7)
MAX_NOTE = 1000
KEPT_FIELDS = (
    "type",
    "reporting_category",
    "source",
    "amount",
    "fee",
    "net",
    "currency",
    "description",
    "status",
    "created",
    "available_on",
)


def record_balance_transactions(seen: list[BalanceTransaction], payout: str = "") -> int:
    """Keep the provider's balance transactions as it listed them (in `payout`, when it
    listed them as that payout's); how many were new or changed."""
    known = BalanceTransaction.objects.in_bulk([bt.id for bt in seen])
    changed = 0
    for bt in seen:
        before = known.get(bt.id)
        bt.payout = payout or (before.payout if before else "")
        if before is not None and all(
            getattr(before, name) == getattr(bt, name) for name in (*KEPT_FIELDS, "payout")
        ):
            continue
        bt.save()
        changed += 1
    return changed


def record_payout(seen: Payout, paid: list[BalanceTransaction]) -> bool:
    before = Payout.objects.filter(pk=seen.pk).first()
    fields = [f.attname for f in Payout._meta.concrete_fields if f.attname != "fetched_at"]
    same = before is not None and all(getattr(before, f) == getattr(seen, f) for f in fields)
    if not same:
        seen.save()
    return record_balance_transactions(paid, payout=seen.pk) > 0 or not same


@dataclass(frozen=True)
class Closed:
    day: date
    currency: str
    status: str
    refunded: int
    matched: int
    differences: dict[str, int]

    def line(self) -> str:
        share = f"{self.matched / self.refunded:.2%}" if self.refunded else "nothing refunded"
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.differences.items()))
        return (
            f"{self.day} {self.currency}: {self.status}; refunded {self.refunded}, matched "
            f"{self.matched} ({share}){'; unexplained: ' + kinds if kinds else ''}"
        )


def days_to_close(today: date) -> list[date]:
    """Every day from the first the books know of the provider's (the oldest balance
    transaction sync_provider fetched: a new installation's books begin with its first
    sync, or as far back as a `sync_provider --since` back-fill reached), at most
    BOOKS_CLOSE_DAYS back, to today: today's differences show the day they happen, and
    the day is closed again tomorrow, with what the provider listed since."""
    first = BalanceTransaction.objects.aggregate(first=Min("created"))["first"]
    if first is None:
        return []
    start = max(today - timedelta(days=settings.BOOKS_CLOSE_DAYS), first.date())
    return [start + timedelta(days=n) for n in range((today - start).days + 1)]


def close_books(
    day: date | None = None, *, every_day: bool = False, finished_before: datetime | None = None
) -> list[Closed] | None:
    """Close `day`, or the days days_to_close names that are due (`every_day`: all of
    them); what each day and currency is now.
    One run at a time (the job lease `close_books`): None when another run holds it, or,
    with `finished_before` (the worker's daily schedule), when a whole run finished since."""
    lease = job_leases.claim_lease(name=JOB, seconds=LEASE_SECONDS, finished_before=finished_before)
    if lease is None:
        return None
    finished = False
    try:
        today = timezone.now().date()
        days = [day] if day is not None else days_to_close(today)
        days = days if day is not None or every_day else [d for d in days if _due(d, today)]
        closed = []
        for one in days:
            if not job_leases.renew_lease(lease):
                return None  # another run took it over: it closes the rest
            closed += close_day(one, today)
        finished = True
        return closed
    finally:
        job_leases.release_lease(lease, finished=finished)


def _due(day: date, today: date) -> bool:
    """Whether close_books closes `day` again: within SETTLED_DAYS of today; or not
    closed; or the provider listed something of it since it was (a balance transaction
    made that day, or the payout of one, fetched or changed since: a back-fill, a payout
    that failed). A closed day past them has nothing new to compare."""
    if day >= today - SETTLED:
        return True
    rows = BooksDay.objects.filter(day=day)
    last = rows.aggregate(checked=Min("checked_at"))["checked"]
    if last is None or rows.exclude(status=Status.CLOSED).exists():
        return True
    start, end = bounds(day)
    made = BalanceTransaction.objects.filter(created__gte=start, created__lt=end)
    paid = Payout.objects.filter(pk__in=made.values("payout"), fetched_at__gt=last)
    return made.filter(fetched_at__gt=last).exists() or paid.exists()


def close_day(day: date, today: date) -> list[Closed]:
    compared = compare_day(day, today)
    for attempt in range(2):
        try:
            return _keep(compared)
        except IntegrityError:  # another close of this day wrote its rows first: again
            if attempt:
                raise
    raise AssertionError("not reached")


def _keep(compared: Day) -> list[Closed]:
    with transaction.atomic():
        for refund_id, name, bt_id in compared.links:  # what the refund shows (the API)
            Refund.objects.filter(pk=refund_id).exclude(**{name: bt_id}).update(**{name: bt_id})
        explained = _keep_differences(compared)
        return [_keep_day(compared, currency, explained) for currency in _currencies(compared)]


def _currencies(compared: Day) -> list[str]:
    seen = set(compared.refunded) | {found.currency for found in compared.found}
    seen |= set(BooksDay.objects.filter(day=compared.day).values_list("currency", flat=True))
    return sorted(seen)


def _keep_differences(compared: Day) -> set[tuple[str, str]]:
    """Write what the day's comparison found; the (kind, reference) of those explained."""
    now = timezone.now()
    rows = BooksDifference.objects.select_for_update().filter(day=compared.day)
    existing = {(row.kind, row.reference): row for row in rows}
    found_keys = set()
    for found in compared.found:
        key = (found.kind, found.reference)
        found_keys.add(key)
        row = existing.get(key) or BooksDifference(
            day=compared.day, kind=found.kind, reference=found.reference, found_at=now
        )
        if (row.ledger_amount, row.provider_amount) != (found.ledger_amount, found.provider_amount):
            # Not what the lead explained any more: it waits for a new explanation.
            row.explanation, row.explained_by, row.explained_at = "", "", None
        row.currency, row.detail = found.currency, found.detail
        row.charge_id, row.refund_id = found.charge_id, found.refund_id
        row.balance_transaction = found.balance_transaction
        row.ledger_amount, row.provider_amount = found.ledger_amount, found.provider_amount
        row.still_there = True
        row.save()
    for key, row in existing.items():
        if key in found_keys:
            continue
        if row.explained_at is None:
            row.delete()
        elif row.still_there:
            row.still_there = False
            row.save(update_fields=["still_there"])
    rows = BooksDifference.objects.filter(day=compared.day, explained_at__isnull=False)
    return set(rows.values_list("kind", "reference"))


def _keep_day(compared: Day, currency: str, explained: set[tuple[str, str]]) -> Closed:
    mine = [found for found in compared.found if found.currency == currency]
    open_ = [found for found in mine if (found.kind, found.reference) not in explained]
    matched = compared.matched[currency] + sum(
        found.refunded for found in mine if (found.kind, found.reference) in explained
    )
    kinds: dict[str, int] = {}
    for found in open_:
        kinds[found.kind] = kinds.get(found.kind, 0) + 1
    status = (
        Status.OPEN if open_ else Status.WAITING if compared.waiting[currency] else Status.CLOSED
    )
    now = timezone.now()
    row = BooksDay.objects.filter(day=compared.day, currency=currency).first() or BooksDay(
        day=compared.day, currency=currency
    )
    if status == Status.CLOSED and row.status != Status.CLOSED:
        row.closed_at = now
    elif status != Status.CLOSED:
        row.closed_at = None
    row.refunded, row.matched, row.differences = compared.refunded[currency], matched, kinds
    row.status, row.checked_at = status, now
    row.save()
    return Closed(compared.day, currency, status, row.refunded, matched, kinds)


def unexplained(days: list[date], today: date) -> Iterator[Found]:
    """The differences of these days nobody has explained, as found now (verify_ledger
    --provider): nothing is written."""
    for day in days:
        explained = set(
            BooksDifference.objects.filter(day=day, explained_at__isnull=False).values_list(
                "kind", "reference"
            )
        )
        for found in compare_day(day, today).found:
            if (found.kind, found.reference) not in explained:
                yield found


def explain(difference_id: int, *, note: str, actor: str) -> BooksDifference:
    """A lead's explanation of a difference: kept with who and when, and its day closed
    again, so the day closes once all of its differences are explained."""
    note = note.strip()
    if not note or len(note) > MAX_NOTE or has_unstorable_characters(note):
        raise errors.InvalidNote(
            "Say why the difference is as it should be: text of at most 1000 characters."
        )
    with transaction.atomic():
        row = BooksDifference.objects.select_for_update().filter(pk=difference_id).first()
        if row is None:
            raise errors.ResourceMissing(f"No difference {difference_id!r} in the books.")
        if row.explained_at is None:
            row.explanation, row.explained_by, row.explained_at = note, actor, timezone.now()
            row.save(update_fields=["explanation", "explained_by", "explained_at"])
    close_day(row.day, timezone.now().date())
    return row
