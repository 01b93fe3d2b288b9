"""Idempotency records and API keys in the admin: read-only."""

from __future__ import annotations

from django.contrib import admin

from ledger_app.access.models import ApiKey
from ledger_app.admin.base import ReadOnlyAdmin, clipped
from ledger_app.admin.filters import exact_id_search
from ledger_app.idempotency.models import IdempotencyRecord


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = [
        "key_display",
        "owner",
        "operation",
        "refund_display",
        "charge_display",
        "created_at",
    ]
    list_select_related = ["refund", "charge"]
    search_fields = ["key"]
    search_help_text = "A key, a refund id or a charge id, exactly."
    ordering = ["-created_at", "-id"]
    raw_id_fields = ["refund", "charge"]

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "key", "refund_id", "charge_id")

    @admin.display(description="Key", ordering="key")
    def key_display(self, obj: IdempotencyRecord) -> str:
        return clipped(obj.key, "wide")

    @admin.display(description="Charge", ordering="charge_id")
    def charge_display(self, obj: IdempotencyRecord) -> str:
        return clipped(obj.charge_id)

    @admin.display(description="Refund", ordering="refund_id")
    def refund_display(self, obj: IdempotencyRecord) -> str:
        return clipped(obj.refund_id)


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys are created and revoked with manage.py; the secret is never stored."""

    list_display = [
        "name_display",
        "prefix",
        "read_only",
        "api_version",
        "created_at",
        "revoked_at",
    ]
    list_filter = ["read_only"]
    fields = ["name", "prefix", "read_only", "api_version", "created_at", "revoked_at"]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="Name", ordering="name")
    def name_display(self, obj: ApiKey) -> str:
        return clipped(obj.name, "text")
