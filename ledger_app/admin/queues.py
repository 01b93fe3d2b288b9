"""The queues a person works through, counted for the admin's index page; and the refunds
made at the provider, counted the same way."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

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
    """The refund queues this person may look at, each with how many it holds (by status,
    which is indexed)."""
    user = request.user
    wanted = [
        (
            "ledger_app.view_refundapproval",
            "Refunds awaiting approval",
            Refund.objects.filter(status=Refund.Status.AWAITING_APPROVAL),
            "admin:ledger_app_refundapproval_changelist",
        ),
        (
            "ledger_app.view_refundattention",
            "Refunds needing attention",
            Refund.objects.filter(needing_attention()),
            "admin:ledger_app_refundattention_changelist",
        ),
    ]
    queues = []
    for permission, title, rows, url_name in wanted:
        if not user.has_perm(permission):
            continue
        queues.append(_queue(title, rows, reverse(url_name)))
    if user.has_perm("ledger_app.view_charge"):
        # Refunds the provider made that the ledger had no room for: a lead resolves each.
        disagreeing = Charge.objects.filter(provider_disagreement__has_key="held")
        url = reverse("admin:ledger_app_charge_changelist") + "?provider=disagrees"
        queues.append(_queue("Charges disagreeing with the provider", disagreeing, url))
    if user.has_perm("ledger_app.view_refund"):
        # Made outside the back office and adopted (ledger_app/mirror): the refund list,
        # filtered by its source.
        made_there = Refund.objects.filter(source=Refund.Source.PROVIDER)
        url = (
            reverse("admin:ledger_app_refund_changelist")
            + f"?source__exact={Refund.Source.PROVIDER}"
        )
        queues.append(_queue("Refunded at the provider", made_there, url))
    return queues


def _queue(title: str, rows, url: str) -> Queue:
    count = rows.order_by()[: COUNT_CAP + 1].count()
    shown = f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)
    return Queue(title, shown, url, count == 0)
