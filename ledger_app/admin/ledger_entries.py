"""Ledger entries in the admin: read-only, as the ledger is."""

from __future__ import annotations

from django.contrib import admin

from ledger_app.admin.base import AmountColumn, ReadOnlyAdmin, clipped, clipped_lines
from ledger_app.admin.export import CsvExport
from ledger_app.admin.filters import exact_id_search
from ledger_app.ledger.models import LedgerEntry
from ledger_app.money import format_money


@admin.register(LedgerEntry)
class LedgerEntryAdmin(CsvExport, AmountColumn, ReadOnlyAdmin):
    export_columns = (  # export.py: the list as CSV
        "id",
        "kind",
        "charge",
        "refund",
        "amount",
        "amount_formatted",
        "refunded_delta",
        "refunded_delta_formatted",
        "currency",
        "actor",
        "memo",
        "created_at",
    )
    list_display = [
        "id",
        "kind",
        "amount_display",
        "delta_display",
        "charge_and_refund",
        "created_at",
        "actor_display",
    ]
    list_filter = ["kind", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["charge", "refund"]
    search_fields = ["charge__id"]
    search_help_text = "A charge id or a refund id, exactly."
    linked_lookups = ("charge__id__exact",)  # a charge's entries (charge_history.history_table)
    ordering = ["-id"]
    raw_id_fields = ["charge", "refund"]

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "charge_id", "refund_id")

    @admin.display(description="Refunded change", ordering="refunded_delta")
    def delta_display(self, obj: LedgerEntry) -> str:
        sign = "+" if obj.refunded_delta > 0 else ""
        return sign + format_money(obj.refunded_delta, obj.currency)

    @admin.display(description="Charge / refund", ordering="charge_id")
    def charge_and_refund(self, obj: LedgerEntry) -> str:
        return clipped_lines(obj.charge_id, obj.refund_id, width="id")

    @admin.display(description="By", ordering="actor")
    def actor_display(self, obj: LedgerEntry) -> str:
        return clipped(obj.actor, "text")
