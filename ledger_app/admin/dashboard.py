"""The admin home page's refund figures: today's refunds per currency and refunds per day by
reason, in the active time zone, each read with one grouped query over a created_at range
(indexed), so the page costs the same with a thousand refunds as with millions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from ledger_app.admin.filters import NO_REASON
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund

VIEW_PERMISSION = "ledger_app.view_refund"
CHART_DAYS = 30  # today and the 29 days before it
# Counted: refunds whose money left, may have left, or is reserved (what amount_refunded
# adds up). A provider's "no" (failed) and a cancellation moved nothing: shown apart.
COUNTED = tuple(Refund.LIVE_STATUSES)
NOT_COUNTED = (Refund.Status.FAILED, Refund.Status.CANCELED)
# The chart's stacking order, bottom up; "" is a refund given no reason.
REASONS: tuple[tuple[str, str], ...] = (
    *((value, label.capitalize()) for value, label in Refund.Reason.choices),
    ("", NO_REASON),
)


@dataclass(frozen=True)
class CurrencyToday:
    """One currency's refunds today: how many count, their total, and how many did not."""

    currency: str  # upper-case ISO code
    count: int
    total: str  # formatted in the currency, e.g. "$12.34"
    url: str  # the refund list showing exactly the counted ones
    not_counted: int  # failed or canceled
    not_counted_url: str


@dataclass(frozen=True)
class Segment:
    """The refunds of one day given one reason."""

    day: date
    reason: str
    reason_label: str
    count: int
    url: str


@dataclass(frozen=True)
class Day:
    day: date
    segments: tuple[Segment, ...]  # one per REASONS entry, in that order
    total: int
    url: str  # the day's counted refunds, any reason


@dataclass(frozen=True)
class RefundActivity:
    zone: str  # the time zone "today" and the days are in, e.g. "Europe/Paris"
    today: date
    currencies: list[CurrencyToday]
    days: list[Day]  # oldest first, CHART_DAYS of them, today last

    @property
    def busiest_day(self) -> int:
        return max((d.total for d in self.days), default=0)


def zone_name(zone: tzinfo) -> str:
    return zone.tzname(None) or str(zone)


def day_start(day: date, zone: tzinfo) -> datetime:
    """The first instant of `day` in `zone` (a day is 23 or 25 hours across a DST change)."""
    return datetime.combine(day, time.min, tzinfo=zone)


def refund_list_url(start: datetime, end: datetime, **filters: str) -> str:
    """The refund list filtered to created_at in [start, end) and `filters`. The bounds are
    written as the list's own date filter writes them (local time with its offset), so
    "Today" shows as chosen there."""
    query = {"created_at__gte": str(start), "created_at__lt": str(end), **filters}
    return f"{reverse('admin:ledger_app_refund_changelist')}?{urlencode(query)}"


def refund_activity_of(request) -> RefundActivity | None:
    """The figures for the signed-in person, in their active time zone; None for people who
    may not view refunds (the figures are money)."""
    if not request.user.has_perm(VIEW_PERMISSION):
        return None
    return refund_activity(zone=timezone.get_current_timezone(), now=timezone.now())


def refund_activity(*, zone: tzinfo, now: datetime, days: int = CHART_DAYS) -> RefundActivity:
    today = timezone.localdate(now, zone)
    return RefundActivity(
        zone=zone_name(zone),
        today=today,
        currencies=refunds_today(zone=zone, today=today),
        days=refunds_per_day(zone=zone, today=today, days=days),
    )


def refunds_today(*, zone: tzinfo, today: date) -> list[CurrencyToday]:
    """Refunds created today in `zone`, per currency (one query over today's range)."""
    start, end = day_start(today, zone), day_start(today + timedelta(days=1), zone)
    counted, not_counted = Q(status__in=COUNTED), Q(status__in=NOT_COUNTED)
    rows = (
        Refund.objects.filter(created_at__gte=start, created_at__lt=end)
        .order_by()
        .values("currency")
        .annotate(
            count=Count("pk", filter=counted),
            total=Sum("amount", filter=counted),
            not_counted=Count("pk", filter=not_counted),
        )
        .order_by("currency")
    )
    return [
        CurrencyToday(
            currency=row["currency"].upper(),
            count=row["count"],
            total=format_money(int(row["total"] or 0), row["currency"]),
            url=refund_list_url(start, end, currency=row["currency"], status__in=",".join(COUNTED)),
            not_counted=row["not_counted"],
            not_counted_url=refund_list_url(
                start, end, currency=row["currency"], status__in=",".join(NOT_COUNTED)
            ),
        )
        for row in rows
    ]


def refunds_per_day(*, zone: tzinfo, today: date, days: int) -> list[Day]:
    """Counted refunds per day in `zone` and reason, for `days` days up to today (one query,
    grouped by the local date; the range keeps it to those days' rows)."""
    first = today - timedelta(days=days - 1)
    rows = (
        Refund.objects.filter(
            created_at__gte=day_start(first, zone),
            created_at__lt=day_start(today + timedelta(days=1), zone),
            status__in=COUNTED,
        )
        .order_by()
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day", "reason")
        .annotate(count=Count("pk"))
    )
    counts = {(row["day"], row["reason"]): row["count"] for row in rows}
    statuses = ",".join(COUNTED)
    chart = []
    for offset in range(days):
        day = first + timedelta(days=offset)
        start, end = day_start(day, zone), day_start(day + timedelta(days=1), zone)
        segments = tuple(
            Segment(
                day=day,
                reason=reason,
                reason_label=label,
                count=counts.get((day, reason), 0),
                url=refund_list_url(start, end, reason__exact=reason, status__in=statuses),
            )
            for reason, label in REASONS
        )
        chart.append(
            Day(
                day=day,
                segments=segments,
                total=sum(s.count for s in segments),
                url=refund_list_url(start, end, status__in=statuses),
            )
        )
    return chart
