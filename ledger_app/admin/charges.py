"""Charges in the admin: find them fast, read their history, refund them safely."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from functools import cache
from typing import cast

from babel.numbers import get_currency_precision, list_currencies
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.db.models import F, Q
from django.template.loader import render_to_string
from django.utils.html import format_html

from ledger_app.admin.base import (
    AmountColumn,
    ReadOnlyAdmin,
    clipped,
    clipped_lines,
)
from ledger_app.admin.bulk_refund import BulkRefundAction
from ledger_app.admin.charge_history import SHOWN_ON_PAGE, history_table, refunds_table
from ledger_app.admin.export import CsvExport
from ledger_app.admin.filters import CurrencyFilter
from ledger_app.admin.refund_form import RefundFormViews, why_not_refundable
from ledger_app.charges.models import OPEN_DISPUTE_STATUSES, Charge
from ledger_app.money import MAJOR_AMOUNT, format_money
from ledger_app.replica import ListsFromReplica
from ledger_app.text import has_unstorable_characters


class RefundStateFilter(admin.SimpleListFilter):
    title = "refund state"
    parameter_name = "refunded"

    def lookups(self, request, model_admin):
        return [
            ("none", "Not refunded"),
            ("partial", "Partly refunded"),
            ("full", "Fully refunded"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "none":
            return queryset.filter(amount_refunded=0)
        if self.value() == "partial":
            return queryset.filter(amount_refunded__gt=0, amount_refunded__lt=F("amount"))
        if self.value() == "full":
            return queryset.filter(amount_refunded=F("amount"))
        return queryset


class DisputeFilter(admin.SimpleListFilter):
    title = "dispute"
    parameter_name = "dispute"

    def lookups(self, request, model_admin):
        return [("open", "Open (cannot be refunded)"), ("closed", "Closed"), ("none", "None")]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(dispute_status__in=OPEN_DISPUTE_STATUSES)
        if self.value() == "closed":
            return queryset.exclude(dispute_id="").exclude(dispute_status__in=OPEN_DISPUTE_STATUSES)
        if self.value() == "none":
            return queryset.filter(dispute_id="")
        return queryset


@cache
def currencies_by_exponent() -> dict[int, list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for code in list_currencies():
        groups[get_currency_precision(code)].append(code.lower())
    return dict(groups)


def amount_search(term: str) -> Q | None:
    """'12.34' finds $12.34 and €12.34 (1234 minor units) and ¥1234 when whole."""
    if not MAJOR_AMOUNT.match(term):
        return None
    value = Decimal(term.replace(",", ""))
    query = Q()
    for exponent, codes in currencies_by_exponent().items():
        minor = value.scaleb(exponent)
        if minor == minor.to_integral_value() and 0 < minor < 2**63:
            query |= Q(amount=int(minor), currency__in=codes)
    return query or None


class ProviderFilter(admin.SimpleListFilter):
    title = "provider"
    parameter_name = "provider"

    def lookups(self, request, model_admin):
        return [("disagrees", "Disagrees (refunds held)")]

    def queryset(self, request, queryset):
        if self.value() == "disagrees":
            return queryset.filter(provider_disagreement__has_key="held")
        return queryset


@admin.register(Charge)
class ChargeAdmin(
    RefundFormViews, BulkRefundAction, CsvExport, ListsFromReplica, AmountColumn, ReadOnlyAdmin
):
    """The list (GET) may read the replica; the charge page, the refund form (refund_form.py)
    and the bulk refund action (bulk_refund.py; a POST to the list) read and write the
    primary."""

    export_columns = (  # export.py: the list as CSV
        "id",
        "amount",
        "amount_formatted",
        "amount_refunded",
        "amount_refunded_formatted",
        "currency",
        "status",
        "status_detail",
        "customer",
        "description",
        "metadata",
        "provider_charge_id",
        "provider_idempotency_key",
        "dispatch_attempts",
        "created_at",
        "updated_at",
    )

    # What an agent acts on first (also the first columns a phone shows), then what tells
    # charges apart; the rest is on the charge's page.
    list_display = [
        "id_display",
        "status",
        "amount_and_refunded",
        "refundable_display",
        "created_at",
        "customer_and_description",
    ]
    list_filter = [
        "status",
        CurrencyFilter,
        RefundStateFilter,
        DisputeFilter,
        ProviderFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["id"]  # see get_search_results
    search_help_text = (
        "Matches exactly: a whole charge id (ch_…), a whole PaymentIntent id (pi_…), a whole "
        "customer reference, or an amount (12.34). Matches partly: description text."
    )
    ordering = ["-created_at", "-id"]
    actions = ["refund_in_full"]
    money_actions = frozenset(cast(list[str], actions))
    change_form_template = "admin/ledger_app/charge/change_form.html"
    fields = [
        "id",
        "status",
        "amount_display",
        "refunded_display",
        "refundable_display",
        "currency",
        "customer",
        "description",
        "metadata",
        "payment_intent",
        "dispute_id",
        "dispute_status",
        "provider_charge_id",
        "provider_disagreement",
        "status_detail",
        "created_at",
        "refund_history",
        "ledger_history",
        "admin_history",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="ID", ordering="id")
    def id_display(self, obj: Charge) -> str:
        return clipped(obj.pk)  # ids made here fit; imported ones may be up to 64 characters

    @admin.display(description="Amount / refunded", ordering="amount")
    def amount_and_refunded(self, obj: Charge) -> str:
        """The amount, and under it what was refunded of it, when anything was."""
        amount = format_money(obj.amount, obj.currency)
        if not obj.amount_refunded:
            return amount
        refunded = format_money(obj.amount_refunded, obj.currency)
        return format_html('{}<span class="second-line">{} refunded</span>', amount, refunded)

    @admin.display(description="Customer / description", ordering="customer")
    def customer_and_description(self, obj: Charge) -> str:
        return clipped_lines(obj.customer, obj.description)

    @admin.display(description="Refunded", ordering="amount_refunded")
    def refunded_display(self, obj: Charge) -> str:
        return format_money(obj.amount_refunded, obj.currency)

    @admin.display(description="Refundable")
    def refundable_display(self, obj: Charge) -> str:
        """Only a succeeded charge with something left shows an amount here."""
        if not obj.is_refundable:
            return f"— ({why_not_refundable(obj)})"
        return format_money(obj.amount_refundable, obj.currency)

    @admin.display(description="Refunds")
    def refund_history(self, obj: Charge):
        return refunds_table(obj)

    @admin.display(description="Ledger entries")
    def ledger_history(self, obj: Charge):
        entries = obj.ledger_entries.order_by("-id")[:SHOWN_ON_PAGE]
        return history_table(
            "admin/ledger_app/charge/ledger_history.html",
            [(e, format_money(e.amount, e.currency)) for e in entries],
            "admin:ledger_app_ledgerentry_changelist",
            obj,
        )

    @admin.display(description="Admin history")
    def admin_history(self, obj: Charge):
        entries = list(
            LogEntry.objects.filter(
                content_type__app_label="ledger_app",
                content_type__model="charge",
                object_id=obj.pk,
            )
            .select_related("user")
            .order_by("-action_time")[:SHOWN_ON_PAGE]
        )
        if not entries:
            return "None"
        return render_to_string("admin/ledger_app/charge/admin_history.html", {"entries": entries})

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        if has_unstorable_characters(term) or len(term) > 200:
            return queryset.none(), False
        if term.startswith("ch_"):  # an id: the primary key, nothing else
            return queryset.filter(pk=term), False
        if term.startswith("pi_"):  # a PaymentIntent: its charges
            return queryset.filter(payment_intent=term), False
        query = Q(customer=term) | Q(description__icontains=term)
        amounts = amount_search(term)
        if amounts is not None:
            query |= amounts
        return queryset.filter(query), False
