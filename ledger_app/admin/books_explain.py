"""The differences list's action, "Explain…": a page that shows the selected differences side
by side and asks why they are as they should be, then ledger_app.books.services.explain for
each, which keeps the note with who and when and closes its day again."""

from __future__ import annotations

from collections import defaultdict
from datetime import date

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import models

from ledger_app import errors
from ledger_app.admin.base import ReadOnlyAdminMixin, report_grouped
from ledger_app.admin.books_sides import sides, with_balance_transaction
from ledger_app.admin.forms import ExplainForm
from ledger_app.books.models import BooksDay, BooksDifference
from ledger_app.books.services import explain
from ledger_app.refunds.services import actor_label

EXPLAIN_PERMISSION = "ledger_app.explain_booksdifference"
MAX_SELECTED = 500  # differences one "Explain…" acts on
ORDER = ["-day", "kind", "reference"]  # newest day first, as the list


class Explained(models.TextChoices):
    """What became of one difference selected for "Explain…". The label is what the person
    is told."""

    EXPLAINED = "explained", "Explained"
    ALREADY = "already", "Not explained here, because someone explained it first"
    GONE = "gone", "Not explained, because a later close no longer finds it"
    REFUSED = "refused", "Refused"


# How an explanation is told, in this order.
OUTCOMES = [
    (Explained.EXPLAINED, messages.SUCCESS),
    (Explained.ALREADY, messages.WARNING),
    (Explained.GONE, messages.WARNING),
    (Explained.REFUSED, messages.ERROR),
]


class ExplainDifferences(ReadOnlyAdminMixin):
    """The action `explain_differences` of the differences admin, for those with the explain
    permission (support leads). Not a money action: it moves no money, so it needs a fresh
    code (as every admin write) but does not restart the code's idle clock."""

    def has_explain_permission(self, request, obj=None) -> bool:
        return request.user.has_perm(EXPLAIN_PERMISSION)

    @admin.action(permissions=["explain"], description="Explain…")
    def explain_differences(self, request, queryset):
        """Explain the selected differences with one note, after a page that shows them side
        by side: each through the service, which closes its day again."""
        chosen = chosen_differences(request, queryset)
        form = ExplainForm(request.POST if request.POST.get("post") == "yes" else None)
        if form.is_bound and form.is_valid():
            self._explain_each(request, chosen, form.cleaned_data["note"])
            return None
        return self.action_confirmation(
            request,
            "admin/ledger_app/booksdifference/explain.html",
            title="Explain differences with the provider",
            form=form,
            selected=chosen,
            action="explain_differences",
            rows=[sides(d) for d in chosen if d.explained_at is None],
            others=[d for d in chosen if d.explained_at is not None],
        )

    def _explain_each(self, request, chosen: list[BooksDifference], note: str) -> None:
        """Each difference through the service on its own; then what became of each, and
        where their days stand now."""
        actor = actor_label(request.user)
        outcomes: dict[Explained, list[str]] = defaultdict(list)
        for difference in chosen:
            outcome, line = self._explain_one(request, difference, note, actor)
            outcomes[outcome].append(line)
        report_grouped(self, request, outcomes, OUTCOMES, noun=("difference", "differences"))
        if chosen:
            self.message_user(request, days_now({(d.day, d.currency) for d in chosen}))
        else:
            self.message_user(request, "No differences were selected.", messages.WARNING)

    def _explain_one(
        self, request, difference: BooksDifference, note: str, actor: str
    ) -> tuple[Explained, str]:
        line = f"{difference.day} {difference.reference}"
        if difference.explained_at is not None:
            return Explained.ALREADY, f"{line} (by {difference.explained_by})"
        try:
            row = explain(difference.pk, note=note, actor=actor)
        except errors.ResourceMissing:  # a later close no longer found it
            return Explained.GONE, line
        except errors.LedgerError as exc:
            return Explained.REFUSED, f"{line} ({exc.code})"
        if (row.explained_by, row.explanation) != (actor, note.strip()):
            return Explained.ALREADY, f"{line} (by {row.explained_by})"  # a moment before
        self.log_change(request, row, f"Explained: {row.explanation}")
        return Explained.EXPLAINED, line


def chosen_differences(request, queryset) -> list[BooksDifference]:
    """The differences "Explain…" was asked about, at most MAX_SELECTED: by the ids posted,
    not only those the filtered list still shows, so that one explained meanwhile is told
    as such rather than silently left out."""
    if request.POST.get("select_across") == "1":  # "select all" across the list's pages
        rows = queryset
    else:
        ids = [
            pk
            for pk in request.POST.getlist(ACTION_CHECKBOX_NAME)
            if pk.isascii() and pk.isdigit() and len(pk) <= 18
        ]
        rows = with_balance_transaction(BooksDifference.objects.filter(pk__in=ids))
    return list(rows.order_by(*ORDER)[:MAX_SELECTED])


def days_now(days: set[tuple[date, str]]) -> str:
    """Where the days of the explained differences stand now: "2026-10-01 USD: closed"."""
    rows = BooksDay.objects.filter(day__in={day for day, _ in days}).order_by("day", "currency")
    now = [
        f"{row.day} {row.currency.upper()}: {row.get_status_display().lower()}"
        for row in rows
        if (row.day, row.currency) in days
    ]
    return "The books now: " + ("; ".join(now) or "no such day")
