"""The queues a person works through, counted for the admin's index page; and the refunds
made at the provider and the days of the books left open, counted the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.urls import reverse

from ledger_app.books.models import BooksDay
from ledger_app.charges.models import Charge
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import needing_attention

COUNT_CAP = 1_000  # counted up to this, then "1000+": the index never scans a large queue


@dataclass(frozen=True)
class Queue:
    title: str
    count: str
    url: str
    empty: bool


def queues_of(request) -> list[Queue]:
    """The queues this person may look at, each with how many it holds (counted up to
    COUNT_CAP: by an indexed status, or in the books' table of a row a day and currency)."""
    user = request.user
    return [
        _queue(title, rows, url)
        for permission, title, rows, url in _queues()
        if user.has_perm(permission)
    ]


def _queues() -> list[tuple[str, str, QuerySet[Any], str]]:
    """(the permission that shows it, its title, its rows, the list that shows them)."""
    return [
        (
            "ledger_app.view_refundapproval",
            "Refunds awaiting approval",
            Refund.objects.filter(status=Refund.Status.AWAITING_APPROVAL),
            reverse("admin:ledger_app_refundapproval_changelist"),
        ),
        (
            "ledger_app.view_refundattention",
            "Refunds needing attention",
            Refund.objects.filter(needing_attention()),
            reverse("admin:ledger_app_refundattention_changelist"),
        ),
        # Refunds the provider made that the ledger had no room for: a lead resolves each.
        (
            "ledger_app.view_charge",
            "Charges disagreeing with the provider",
            Charge.objects.filter(provider_disagreement__has_key="held"),
            reverse("admin:ledger_app_charge_changelist") + "?provider=disagrees",
        ),
        # Made outside the back office and adopted (ledger_app/mirror): the refund list,
        # filtered by its source.
        (
            "ledger_app.view_refund",
            "Refunded at the provider",
            Refund.objects.filter(source=Refund.Source.PROVIDER),
            reverse("admin:ledger_app_refund_changelist")
            + f"?source__exact={Refund.Source.PROVIDER}",
        ),
        # Days whose books hold a difference nobody has explained: a lead explains each.
        (
            "ledger_app.view_booksday",
            "Days of the books open",
            BooksDay.objects.filter(status=BooksDay.Status.OPEN),
            reverse("admin:ledger_app_booksday_changelist")
            + f"?status__exact={BooksDay.Status.OPEN}",
        ),
    ]


def _queue(title: str, rows, url: str) -> Queue:
    count = rows.order_by()[: COUNT_CAP + 1].count()
    shown = f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)
    return Queue(title, shown, url, count == 0)
