"""GET /refund-status/<token>: where a customer's refund is, for whoever holds the link in
their mail (ledger_app/customer_mail/links.py), in the mail's language.

It shows the refund's state, amount, the card's last four digits, when the money should
arrive and the trace number (ARN) once known; nothing else about the customer or the
charge (no address, no name, no other refund). Links expire (REFUND_STATUS_LINK_DAYS), a
client address may open REFUND_STATUS_PAGES_PER_MINUTE a minute, a link in a mail to an
address staff have since replaced works no more, and the answer is never cached nor sent
on as a referrer (the link is the key to it)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import translation
from django.views.decorators.http import require_safe

from ledger_app.customer_mail.links import read_link
from ledger_app.customer_mail.messages import written_date
from ledger_app.customer_mail.services import refund_days
from ledger_app.money import format_money
from ledger_app.operations.rate_counters import count_in_window
from ledger_app.refunds.models import Refund
from serving.client_address import counted_address

# What the customer is told of each state, in their words (Refund.Status: the back office's).
STATES: dict[str, str] = {
    Refund.Status.PENDING: "on_its_way",
    Refund.Status.UNKNOWN: "on_its_way",  # the back office's doubt, not the customer's news
    Refund.Status.AWAITING_APPROVAL: "being_checked",
    Refund.Status.SUCCEEDED: "sent",
    Refund.Status.FAILED: "failed",
    Refund.Status.CANCELED: "canceled",
}


@require_safe
def refund_status(request: HttpRequest, token: str) -> HttpResponse:
    counted = count_in_window(
        key=f"refund-status:{counted_address(request)}",
        limit=settings.REFUND_STATUS_PAGES_PER_MINUTE,
        period_seconds=60,
    )
    if not counted.within_limit:
        response = _page(request, "status_page/refund.html", {"problem": "busy"}, status=429)
        response["Retry-After"] = str(max(1, int(counted.seconds_left + 0.999)))
        return response
    link = read_link(token)
    if link is None:
        return _page(request, "status_page/refund.html", {"problem": "invalid"}, status=404)
    if link.expired:
        context = {"problem": "expired"}
        return _page(
            request, "status_page/refund.html", context, status=410, language=link.language
        )
    refund = Refund.objects.select_related("charge").filter(pk=link.refund_id).first()
    if refund is None:
        return _page(request, "status_page/refund.html", {"problem": "invalid"}, status=404)
    if not link.sent_to(refund.customer_email):  # staff gave its mails another address since
        context = {"problem": "expired"}
        return _page(
            request, "status_page/refund.html", context, status=410, language=link.language
        )
    context = _shown(refund, link.language)
    return _page(request, "status_page/refund.html", context, language=link.language)


def _shown(refund: Refund, language: str) -> dict[str, Any]:
    made, arrive_from, arrive_to = refund_days(refund)
    return {
        "state": STATES.get(refund.status, "on_its_way"),
        "amount": format_money(refund.amount, refund.currency, locale=language),
        "card_last4": refund.charge.card_last4,
        "made_on": written_date(made, language),
        "arrival_from": written_date(arrive_from, language),
        "arrival_to": written_date(arrive_to, language),
        "reference": refund.destination_reference
        if refund.status == Refund.Status.SUCCEEDED
        else "",
    }


def _page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    language: str | None = None,
) -> HttpResponse:
    language = language or settings.LANGUAGES[0][0]
    with translation.override(language):
        response = render(request, template, {**context, "language": language}, status=status)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the link is the key: never pass it on
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Content-Language"] = language
    return response
