"""Read-only admin over the ledger. Money moves only through the services."""

from __future__ import annotations

from django.contrib import admin

from ledger_app.models import Charge, IdempotencyRecord, LedgerEntry, Refund
from ledger_app.money import format_money


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing here is added, changed or deleted by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Charge)
class ChargeAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "status",
        "amount_display",
        "refunded_display",
        "refundable_display",
        "description",
    ]
    list_filter = ["status", "currency"]
    search_fields = ["id", "description", "customer"]
    date_hierarchy = "created_at"

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: Charge) -> str:
        return format_money(obj.amount, obj.currency)

    @admin.display(description="Refunded", ordering="amount_refunded")
    def refunded_display(self, obj: Charge) -> str:
        return format_money(obj.amount_refunded, obj.currency)

    @admin.display(description="Refundable")
    def refundable_display(self, obj: Charge) -> str:
        return format_money(obj.amount_refundable, obj.currency)


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "charge", "amount_display", "status", "reason", "source"]
    list_filter = ["status", "reason", "source"]
    search_fields = ["id", "charge__id", "provider_idempotency_key"]
    list_select_related = ["charge"]

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: Refund) -> str:
        return format_money(obj.amount, obj.currency)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ["key", "operation", "refund", "created_at"]
    search_fields = ["key", "refund__id"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "kind", "charge", "refund", "amount", "refunded_delta"]
    list_filter = ["kind", "currency"]
    search_fields = ["charge__id", "refund__id"]
