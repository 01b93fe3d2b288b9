"""The books against the provider in the admin: each day's close as close_books left it, and
the differences it found, each beside the refund, the charge and the provider's balance
transaction it is about (explained by a lead: books_explain.py)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ledger_app.admin.base import ReadOnlyAdmin, clipped_lines
from ledger_app.admin.books_explain import ORDER, ExplainDifferences
from ledger_app.admin.books_sides import (
    amounts_of,
    linked,
    provider_side,
    sides,
    with_balance_transaction,
)
from ledger_app.admin.export import CsvExport
from ledger_app.admin.filters import CurrencyFilter, exact_id_search
from ledger_app.books.models import BooksDay, BooksDifference
from ledger_app.money import format_money

Kind = BooksDifference.Kind
# The differences are the ledger's movements set beside the provider's: exporting them takes
# the ledger's export permission (BooksDifference declares no export permission of its own).
EXPORT_PERMISSION = "ledger_app.export_ledgerentry"
EXPORTED = (
    "id",
    "day",
    "currency",
    "kind",
    "reference",
    "refund",
    "charge",
    "balance_transaction",
    "ledger_amount",
    "ledger_amount_formatted",
    "provider_amount",
    "provider_amount_formatted",
    "detail",
    "still_there",
    "explanation",
    "explained_by",
    "explained_at",
    "found_at",
)


def share(matched: int, refunded: int) -> str:
    """The part of the value refunded that is matched: "100%" only when all of it is (never
    rounded up to it), else to a hundredth of a percent ("99.97%")."""
    if refunded <= 0:
        return "nothing refunded"
    hundredths = matched * 10_000 // refunded
    if hundredths % 100 == 0:
        return f"{hundredths // 100}%"
    return f"{hundredths // 100}.{hundredths % 100:02d}%"


def differences_url(day: date, currency: str, **filters: str) -> str:
    """The differences list showing one day's differences in one currency (and `filters`),
    through the list's own date hierarchy and filters."""
    query = {
        "day__year": str(day.year),
        "day__month": str(day.month),
        "day__day": str(day.day),
        "currency": currency,
        **filters,
    }
    return f"{reverse('admin:ledger_app_booksdifference_changelist')}?{urlencode(query)}"


@admin.register(BooksDay)
class BooksDayAdmin(ReadOnlyAdmin):
    """Each day (UTC) and currency as close_books last found it, newest first: the value
    refunded, how much of it the provider's balance transactions and payouts account for (or
    a lead explained), and what is left unexplained, by kind."""

    list_display = [
        "day_display",
        "currency_display",
        "refunded_display",
        "matched_display",
        "differences_display",
        "status",
        "closed_at",
    ]
    list_filter = ["status", CurrencyFilter]
    ordering = ["-day", "currency"]
    fields = [
        "day_display",
        "currency_display",
        "refunded_display",
        "matched_display",
        "differences_display",
        "status",
        "closed_at",
        "checked_at",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="Day (UTC)", ordering="day")
    def day_display(self, obj: BooksDay) -> str:
        return obj.day.isoformat()

    @admin.display(description="Currency", ordering="currency")
    def currency_display(self, obj: BooksDay) -> str:
        return obj.currency.upper()

    @admin.display(description="Refunded", ordering="refunded")
    def refunded_display(self, obj: BooksDay) -> str:
        return format_money(obj.refunded, obj.currency)

    @admin.display(description="Matched", ordering="matched")
    def matched_display(self, obj: BooksDay) -> str:
        """The value matched, and under it its share of the value refunded."""
        matched = format_money(obj.matched, obj.currency)
        return format_html(
            '{}<span class="second-line">{}</span>', matched, share(obj.matched, obj.refunded)
        )

    @admin.display(description="Unexplained differences")
    def differences_display(self, obj: BooksDay) -> str:
        """How many of each kind nobody has explained, each linking to them."""
        kinds = [
            (count, Kind(kind).label, differences_url(obj.day, obj.currency, **unexplained(kind)))
            for kind, count in sorted((obj.differences or {}).items())
            if kind in Kind.values and count
        ]
        return render_to_string(
            "admin/ledger_app/booksday/differences.html",
            {"kinds": kinds, "all_url": differences_url(obj.day, obj.currency)},
        )


def unexplained(kind: str) -> dict[str, str]:
    return {"kind__exact": kind, "explained": "no"}


class ExplainedFilter(admin.SimpleListFilter):
    title = "explained"
    parameter_name = "explained"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("no", "Not yet"), ("yes", "Explained")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("no", "yes"):
            return queryset.filter(explained_at__isnull=self.value() == "no")
        return queryset


@admin.register(BooksDifference)
class BooksDifferenceAdmin(ExplainDifferences, CsvExport, ReadOnlyAdmin):
    """What the ledger and the provider do not agree on, newest day first, beside the refund,
    the charge and the balance transaction; explained by those with the explain permission
    (support leads), with a note, through the service (books_explain.py)."""

    export_columns = EXPORTED  # export.py: the list as CSV
    list_display = [
        "day_display",
        "kind",
        "refund_and_charge",
        "amounts",
        "balance_transaction_cell",
        "explained_display",
    ]
    list_filter = ["kind", ExplainedFilter, CurrencyFilter]
    date_hierarchy = "day"  # one day's differences: the days list links there
    ordering = ORDER
    search_fields = ["reference"]  # see get_search_results
    search_help_text = "A refund id, a charge id or a balance transaction id, exactly."
    actions = ["explain_differences"]
    fields = [
        "day_display",
        "currency_display",
        "kind",
        "reference",
        "side_by_side",
        "detail",
        "still_there",
        "explanation",
        "explained_by",
        "explained_at",
        "found_at",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    def get_queryset(self, request):
        return with_balance_transaction(super().get_queryset(request))

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(
            queryset, search_term, "refund_id", "charge_id", "balance_transaction"
        )

    def has_export_permission(self, request) -> bool:
        return request.user.has_perm(EXPORT_PERMISSION)

    @admin.display(description="Day (UTC)", ordering="day")
    def day_display(self, obj: BooksDifference) -> str:
        return obj.day.isoformat()

    @admin.display(description="Currency", ordering="currency")
    def currency_display(self, obj: BooksDifference) -> str:
        return obj.currency.upper()

    @admin.display(description="Refund / charge", ordering="refund_id")
    def refund_and_charge(self, obj: BooksDifference) -> str:
        """The ledger's side: the refund and, under it, its charge, each linking to its page."""
        return format_html(
            '<span class="lines">{}{}</span>',
            linked("ledger_app_refund_change", obj.refund_id),
            linked("ledger_app_charge_change", obj.charge_id),
        )

    @admin.display(description="Ledger / provider")
    def amounts(self, obj: BooksDifference) -> str:
        """What the ledger moved, and under it what the provider's balance transaction did."""
        return render_to_string(
            "admin/ledger_app/booksdifference/amounts_cell.html", {"amounts": amounts_of(obj)}
        )

    @admin.display(description="Balance transaction", ordering="balance_transaction")
    def balance_transaction_cell(self, obj: BooksDifference) -> str:
        return render_to_string(
            "admin/ledger_app/booksdifference/balance_transaction_cell.html",
            {"side": provider_side(obj)},
        )

    @admin.display(description="Explained")
    def explained_display(self, obj: BooksDifference) -> str:
        if obj.explained_at is None:
            return "No"
        return clipped_lines(f"By {obj.explained_by}", obj.explanation)

    @admin.display(description="The ledger and the provider")
    def side_by_side(self, obj: BooksDifference) -> str:
        return render_to_string("admin/ledger_app/booksdifference/side_by_side.html", sides(obj))
