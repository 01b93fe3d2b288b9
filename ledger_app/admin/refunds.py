"""Refunds, their ledger and keys in the admin: read-only, fast, and a queue of stuck ones."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from ledger_app.admin.base import ReadOnlyAdmin, money
from ledger_app.models import ApiKey, IdempotencyRecord, LedgerEntry, Refund, RefundAttention
from ledger_app.services.dispatch import dispatch_refund, reconcile_refund
from ledger_app.services.text import has_unstorable_characters


class IssuedByFilter(admin.SimpleListFilter):
    """Staff users, not every user ever seen on a refund: no scan of the refunds table."""

    title = "issued by"
    parameter_name = "created_by"

    def lookups(self, request, model_admin):
        staff = get_user_model().objects.filter(is_staff=True).order_by("username")[:100]
        return [(str(u.pk), u.get_username()) for u in staff]

    def queryset(self, request, queryset):
        value = self.value()
        if value and value.isascii() and value.isdigit():
            return queryset.filter(created_by_id=value)
        return queryset


def exact_id_search(queryset, term: str, *fields: str):
    term = term.strip()
    if not term:
        return queryset, False
    if has_unstorable_characters(term) or len(term) > 255:
        return queryset.none(), False
    query = Q()
    for field in fields:
        query |= Q(**{field: term})
    return queryset.filter(query), False


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "charge",
        "amount_display",
        "status",
        "reason",
        "source",
        "actor",
    ]
    list_filter = [
        "status",
        "reason",
        "source",
        IssuedByFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["id"]
    search_help_text = "A refund id, a charge id or a provider key, exactly."
    ordering = ["-created_at", "-id"]
    list_select_related = ["charge"]
    raw_id_fields = ["charge", "created_by"]
    readonly_fields = [
        "id",
        "charge",
        "amount_display",
        "currency",
        "status",
        "status_detail",
        "reason",
        "note",
        "metadata",
        "source",
        "actor",
        "created_by",
        "provider_idempotency_key",
        "provider_refund_id",
        "dispatch_attempts",
        "leased_until",
        "created_at",
        "updated_at",
    ]
    fields = readonly_fields

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: Refund) -> str:
        return money(obj.amount, obj.currency)

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "pk", "charge_id", "provider_idempotency_key")


def needing_attention(now=None):
    """Unknown and failed refunds, and pending ones nobody is dispatching."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.REFUND_DISPATCH_LEASE_SECONDS)
    return Q(status__in=[Refund.Status.UNKNOWN, Refund.Status.FAILED]) | Q(
        Q(leased_until__lte=now) | Q(leased_until__isnull=True, created_at__lte=stale),
        status=Refund.Status.PENDING,
    )


@admin.register(RefundAttention)
class RefundAttentionAdmin(RefundAdmin):
    """The queue support works through: outcomes unknown, declines, stuck dispatches."""

    list_filter = ["status", "reason", "source", ("created_at", admin.DateFieldListFilter)]
    list_display = [*RefundAdmin.list_display[:5], "status_detail", "dispatch_attempts"]
    actions = ["reconcile_now", "retry_dispatch"]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(needing_attention())

    @admin.action(permissions=["refund"], description="Reconcile now (ask the provider)")
    def reconcile_now(self, request, queryset):
        self._run(request, queryset, reconcile_refund, "Reconciled")

    @admin.action(permissions=["refund"], description="Retry dispatch (same provider key)")
    def retry_dispatch(self, request, queryset):
        self._run(
            request, queryset.exclude(status=Refund.Status.FAILED), dispatch_refund, "Dispatched"
        )

    def _run(self, request, queryset, service, verb: str) -> None:
        results = []
        for refund_id in queryset.values_list("pk", flat=True)[:500]:
            refund = service(refund_id)
            results.append(f"{refund.pk}: {refund.status}")
        if results:
            self.message_user(request, f"{verb}: {', '.join(results)}", messages.INFO)
        else:
            self.message_user(request, "Nothing to do for the selected refunds.", messages.INFO)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "kind",
        "charge",
        "refund",
        "amount_display",
        "refunded_delta",
        "actor",
    ]
    list_filter = ["kind", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["charge", "refund"]
    search_fields = ["charge__id"]
    search_help_text = "A charge id or a refund id, exactly."
    ordering = ["-id"]
    raw_id_fields = ["charge", "refund"]

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: LedgerEntry) -> str:
        return money(obj.amount, obj.currency)

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "charge_id", "refund_id")


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ["key", "operation", "refund", "charge", "created_at"]
    list_select_related = ["refund", "charge"]
    search_fields = ["key"]
    search_help_text = "A key, a refund id or a charge id, exactly."
    ordering = ["-created_at", "-id"]
    raw_id_fields = ["refund", "charge"]

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "key", "refund_id", "charge_id")


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys are created and revoked with manage.py; the secret is never stored."""

    list_display = ["name", "prefix", "read_only", "created_at", "revoked_at"]
    list_filter = ["read_only"]
    fields = ["name", "prefix", "read_only", "created_at", "revoked_at"]
    readonly_fields = fields
