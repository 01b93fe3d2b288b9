"""The simulated provider's side, read-only, to compare with the ledger (registered here:
the simulated provider imports nothing from the back office)."""

from django.contrib import admin

from ledger_app.admin.base import ReadOnlyAdmin
from simulated_provider.models import ProviderCharge, ProviderRefund, ProviderRequest


@admin.register(ProviderRefund)
class ProviderRefundAdmin(ReadOnlyAdmin):
    list_display = [
        "provider_id",
        "idempotency_key",
        "charge_reference",
        "amount",
        "currency",
        "status",
        "created_at",
    ]
    list_filter = ["status", "currency"]
    search_fields = ["provider_id", "idempotency_key", "charge_reference"]


@admin.register(ProviderCharge)
class ProviderChargeAdmin(ReadOnlyAdmin):
    list_display = ["provider_id", "idempotency_key", "amount", "currency", "status", "created_at"]
    list_filter = ["status", "currency"]
    search_fields = ["provider_id", "idempotency_key"]


@admin.register(ProviderRequest)
class ProviderRequestAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "operation", "idempotency_key", "behaviour", "outcome"]
    list_filter = ["operation", "behaviour", "outcome"]
    search_fields = ["idempotency_key"]
