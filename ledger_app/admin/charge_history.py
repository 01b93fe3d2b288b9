"""A charge's newest refunds and ledger entries as its pages show them: the charge page and
the refund form."""

from __future__ import annotations

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import urlencode

from ledger_app.charges.models import Charge
from ledger_app.money import format_money

SHOWN_ON_PAGE = 20  # refunds and ledger entries listed on a charge page


def history_table(template: str, rows: list[tuple], changelist: str, charge: Charge) -> str:
    """The newest of a charge's refunds or ledger entries (each row: the object and its
    amount, formatted) and a link to all of them; "None" when it has none."""
    if not rows:
        return "None"
    all_url = reverse(changelist) + "?" + urlencode({"charge__id__exact": charge.pk})
    return render_to_string(template, {"rows": rows, "all_url": all_url})


def refunds_table(charge: Charge) -> str:
    refunds = charge.refunds.order_by("-created_at", "-id")[:SHOWN_ON_PAGE]
    return history_table(
        "admin/ledger_app/charge/refund_history.html",
        [(r, format_money(r.amount, r.currency)) for r in refunds],
        "admin:ledger_app_refund_changelist",
        charge,
    )
