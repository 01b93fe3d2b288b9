"""Figures read from the database when /metrics is scraped: what waits, and for how long.

Read at scrape time, not counted in a process, so every web process reports the same
numbers and gunicorn's workers never add them up. Five queries whatever the row count:
the books' over the days close_books keeps; the others each reading only the open rows
through an index on status (refund_status_lease for the refunds in doubt and the worker's
queue, delivery_due for the webhooks, the partial customer_mail_due and
customer_mail_sending for the customer mails): succeeded and failed refunds and sent
mails, however many, are never read. docs/operating/metrics.md has the figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Case, CharField, Count, Max, Min, Q, QuerySet, Sum, Value, When
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledger_app.books.models import BooksDay
from ledger_app.charges.models import MovementStatus
from ledger_app.customer_mail.models import CustomerMail
from ledger_app.events.selectors import due_deliveries
from ledger_app.leases import in_doubt, waiting_to_send
from ledger_app.refunds.models import Refund

log = logging.getLogger("ledger_app.metrics")

UNKNOWN = "unknown"
STALE_PENDING = "stale_pending"
AWAITING_APPROVAL = "awaiting_approval"
STATES = (UNKNOWN, STALE_PENDING, AWAITING_APPROVAL)
# Age buckets, each holding ages from the previous bound (inclusive) up to its own (not):
# a refund exactly 5 minutes old is in "5m-1h". The last one is open-ended.
AGE_BUCKETS: tuple[tuple[str, timedelta | None], ...] = (
    ("0-5m", timedelta(minutes=5)),
    ("5m-1h", timedelta(hours=1)),
    ("1h-24h", timedelta(hours=24)),
    ("24h+", None),
)


class DatabaseCollector(Collector):
    """The database's figures, as gauges. Added to each scrape's registry (views.py), never
    to a process's own, so in multiprocess mode they are read once, not once per worker."""

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = timezone.now()
        try:
            families = [
                *in_doubt_families(now),
                *send_queue_families(now),
                *webhook_families(now),
                *customer_mail_families(now),
                *books_families(now),
            ]
        except DatabaseError:
            # A scrape without these figures, and a 0 to alert on, rather than a 500 that
            # would also hide every counter.
            log.exception("metrics: the database figures could not be read")
            families = []
        up = GaugeMetricFamily(
            "ledger_metrics_database_up",
            "1 when this scrape read the database figures, 0 when the database failed.",
            value=1 if families else 0,
        )
        took = GaugeMetricFamily(
            "ledger_metrics_database_seconds",
            "Time this scrape spent reading the database figures.",
            value=time.perf_counter() - started,
        )
        yield from families
        yield up
        yield took


def age_bucket(now: datetime) -> Case:
    """The bucket of a row's created_at, as the database computes it (bounds fixed at `now`)."""
    bounded = [(name, bound) for name, bound in AGE_BUCKETS if bound is not None]
    return Case(
        *[When(created_at__gt=now - bound, then=Value(name)) for name, bound in bounded],
        default=Value(AGE_BUCKETS[-1][0]),
        output_field=CharField(),
    )


def in_doubt_families(now: datetime) -> list[Metric]:
    """Refunds whose money is reserved with no final word, by state and by age since they
    were created (how long the customer has waited): unknown (the provider did not answer),
    stale pending (no sender holds it: what the reconciler treats as in doubt, past
    REFUND_DISPATCH_LEASE_SECONDS) and awaiting approval, and when the first approval
    expires (APPROVAL_EXPIRY_HOURS after its request). One grouped query."""
    counts, oldest, expiries = _tally_in_doubt(_in_doubt_groups(now))
    by_bucket = GaugeMetricFamily(
        "ledger_refunds_in_doubt",
        "Refunds reserved without a final word, by state (unknown, stale_pending, "
        "awaiting_approval) and age since created (0-5m, 5m-1h, 1h-24h, 24h+).",
        labels=["state", "age"],
    )
    for (state_name, age), count in counts.items():
        by_bucket.add_metric([state_name, age], count)
    oldest_age = GaugeMetricFamily(
        "ledger_refunds_in_doubt_oldest_age_seconds",
        "Age of the oldest refund in each in-doubt state (0 when there is none).",
        labels=["state"],
    )
    for state_name in STATES:
        oldest_age.add_metric([state_name], _age(now, oldest.get(state_name)))
    # A time, not an age: the alert compares it with Prometheus's own time(). No sample at
    # all when nothing awaits approval, so no threshold can mistake "none" for "expiring".
    soonest_expiry = GaugeMetricFamily(
        "ledger_refund_approval_soonest_expiry_timestamp_seconds",
        "When the first refund awaiting approval expires (canceled and released unless "
        "someone decides it first), in Unix seconds; no sample when none awaits.",
    )
    if expiries:
        soonest_expiry.add_metric([], min(expiries).timestamp())
    return [by_bucket, oldest_age, soonest_expiry]


def _in_doubt_groups(now: datetime) -> QuerySet[Refund, dict[str, Any]]:
    """The refunds in doubt grouped by state and age bucket: how many, the oldest, and the
    soonest approval expiry of each group."""
    state = Case(
        When(status=MovementStatus.UNKNOWN, then=Value(UNKNOWN)),
        When(status=MovementStatus.AWAITING_APPROVAL, then=Value(AWAITING_APPROVAL)),
        default=Value(STALE_PENDING),  # the filter lets nothing else through
        output_field=CharField(),
    )
    return (
        Refund.objects.filter(
            (in_doubt(now, settings.REFUND_DISPATCH_LEASE_SECONDS) & Refund.sent_here())
            | Q(status=MovementStatus.AWAITING_APPROVAL)
        )
        .order_by()
        .annotate(state=state, age=age_bucket(now))
        .values("state", "age")
        .annotate(
            refunds=Count("pk"),
            oldest=Min("created_at"),
            # Read only from the awaiting_approval groups: a refund approved since keeps
            # its expiry, and is pending now.
            soonest_expiry=Min("approval_expires_at"),
        )
    )


def _tally_in_doubt(
    groups: Iterable[dict[str, Any]],
) -> tuple[dict[tuple[str, str], int], dict[str, datetime], list[datetime]]:
    """Counts by (state, age), every pair present (0 when none); the oldest by state; and
    the awaiting approval groups' soonest expiries."""
    counts = {(state, age): 0 for state in STATES for age, _ in AGE_BUCKETS}
    oldest: dict[str, datetime] = {}
    expiries: list[datetime] = []
    for row in groups:
        counts[row["state"], row["age"]] = row["refunds"]
        if row["state"] not in oldest or row["oldest"] < oldest[row["state"]]:
            oldest[row["state"]] = row["oldest"]
        if row["state"] == AWAITING_APPROVAL and row["soonest_expiry"] is not None:
            expiries.append(row["soonest_expiry"])
    return counts, oldest, expiries


def send_queue_families(now: datetime) -> list[Metric]:
    """The worker's queue (selectors.waiting_to_send): pending refunds no sender holds."""
    queue = Refund.objects.filter(waiting_to_send(now), Refund.sent_here()).order_by()
    figures = queue.aggregate(refunds=Count("pk"), oldest=Min("created_at"))
    return [
        GaugeMetricFamily(
            "ledger_refund_queue_length",
            "Pending refunds no sender holds: what process_refunds sends next.",
            value=figures["refunds"],
        ),
        GaugeMetricFamily(
            "ledger_refund_queue_oldest_age_seconds",
            "Worker lag: age of the oldest refund waiting to be sent (0 when none waits).",
            value=_age(now, figures["oldest"]),
        ),
    ]


def webhook_families(now: datetime) -> list[Metric]:
    """Deliveries a webhook worker may claim now (selectors.due_deliveries)."""
    due = due_deliveries(now).order_by()
    figures = due.aggregate(deliveries=Count("pk"), oldest=Min("next_attempt_at"))
    return [
        GaugeMetricFamily(
            "ledger_webhook_deliveries_due",
            "Pending webhook deliveries that are due, to live endpoints, held by no worker.",
            value=figures["deliveries"],
        ),
        GaugeMetricFamily(
            "ledger_webhook_delivery_lag_seconds",
            "How long the most overdue delivery has been due (0 when none is).",
            value=_age(now, figures["oldest"]),
        ),
    ]


def customer_mail_families(now: datetime) -> list[Metric]:
    """Customer mails not yet handed to the SMTP server (waiting, or being retried)."""
    waiting = CustomerMail.objects.filter(
        status__in=[CustomerMail.Status.PENDING, CustomerMail.Status.SENDING]
    ).order_by()
    figures = waiting.aggregate(mails=Count("pk"), oldest=Min("created_at"))
    return [
        GaugeMetricFamily(
            "ledger_customer_mails_waiting",
            "Customer mails written and not yet accepted by the SMTP server (due or retrying).",
            value=figures["mails"],
        ),
        GaugeMetricFamily(
            "ledger_customer_mail_wait_seconds",
            "How long the oldest of them has waited since its change (0 when none does).",
            value=_age(now, figures["oldest"]),
        ),
    ]


# The books' ages: a day refunded more than BOOKS_SETTLED_DAYS ago should be matched and
# paid out (the provider pays out within a few days).
BOOKS_SETTLED_DAYS = 4
BOOKS_AGES = ("0-4d", "4d+")


def books_families(now: datetime) -> list[Metric]:
    """The books against the provider as close_books last found them (BooksDay), over the
    last BOOKS_CLOSE_DAYS: the value refunded and the part matched to the provider and paid
    out (or explained), by currency and age of the day (0-4d: refunded in the last four
    days; 4d+: before); the days with an unexplained difference. One grouped query."""
    today = now.date()
    settled = today - timedelta(days=BOOKS_SETTLED_DAYS)
    days = BooksDay.objects.filter(day__gte=today - timedelta(days=settings.BOOKS_CLOSE_DAYS))
    groups = (
        days.order_by()
        .annotate(
            age=Case(
                When(day__lt=settled, then=Value(BOOKS_AGES[1])),
                default=Value(BOOKS_AGES[0]),
                output_field=CharField(),
            )
        )
        .values("currency", "age")
        .annotate(
            refunded=Sum("refunded"),
            matched=Sum("matched"),
            open_days=Count("pk", filter=Q(status=BooksDay.Status.OPEN, day__lt=today)),
            checked=Max("checked_at"),
        )
    )
    refunded = GaugeMetricFamily(
        "ledger_books_refunded_value",
        "Value refunded (minor units), by currency and age of its day (0-4d, 4d+), over "
        "the days close_books keeps.",
        labels=["currency", "age"],
    )
    matched = GaugeMetricFamily(
        "ledger_books_matched_value",
        "Of it: matched to the provider's balance transactions and paid out, or explained "
        "by a lead (minor units).",
        labels=["currency", "age"],
    )
    open_days = GaugeMetricFamily(
        "ledger_books_open_days",
        "Days before today (per currency) with a difference from the provider nobody has "
        "explained.",
        labels=["currency"],
    )
    last_checked = GaugeMetricFamily(
        "ledger_books_checked_timestamp_seconds",
        "When close_books last closed a day, in Unix seconds; no sample before the first.",
    )
    opened: dict[str, int] = {}
    checked = []
    for row in groups:
        refunded.add_metric([row["currency"], row["age"]], row["refunded"] or 0)
        matched.add_metric([row["currency"], row["age"]], row["matched"] or 0)
        opened[row["currency"]] = opened.get(row["currency"], 0) + row["open_days"]
        checked.append(row["checked"])
    for currency, count in sorted(opened.items()):
        open_days.add_metric([currency], count)
    if checked:
        last_checked.add_metric([], max(checked).timestamp())
    return [refunded, matched, open_days, last_checked]


def _age(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0
