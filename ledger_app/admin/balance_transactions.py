"""The provider's balance transactions and payouts in the admin: read-only, as sync_provider
last mirrored them; what the books close each day against."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ledger_app.admin.base import AmountColumn, ReadOnlyAdmin, clipped
from ledger_app.admin.books_sides import linked
from ledger_app.admin.filters import CurrencyFilter, exact_id_search
from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.money import format_money


@admin.register(BalanceTransaction)
class BalanceTransactionAdmin(AmountColumn, ReadOnlyAdmin):
    """Each movement of the balance at the provider: its amount (a refund's is negative), the
    fee the provider kept, what moved it and the payout that paid it out."""

    list_display = [
        "id_display",
        "type",
        "amount_and_fee",
        "source_display",
        "payout_display",
        "created",
    ]
    list_filter = ["type", CurrencyFilter, ("created", admin.DateFieldListFilter)]
    search_fields = ["id"]  # see get_search_results
    search_help_text = (
        "A balance transaction id, what moved it (the provider's id) or a payout id, exactly."
    )
    ordering = ["-created", "-id"]
    fields = [
        "id",
        "type",
        "reporting_category",
        "amount_display",
        "fee_display",
        "net_display",
        "currency",
        "source",
        "description",
        "status",
        "created",
        "available_on",
        "payout_display",
        "fetched_at",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "pk", "source", "payout")

    @admin.display(description="ID", ordering="id")
    def id_display(self, obj: BalanceTransaction) -> str:
        return clipped(obj.pk)

    @admin.display(description="Amount / fee", ordering="amount")
    def amount_and_fee(self, obj: BalanceTransaction) -> str:
        """The amount, and under it the fee the provider kept of it."""
        fee = format_money(obj.fee, obj.currency)
        return format_html(
            '{}<span class="second-line">fee {}</span>', format_money(obj.amount, obj.currency), fee
        )

    @admin.display(description="Fee", ordering="fee")
    def fee_display(self, obj: BalanceTransaction) -> str:
        return format_money(obj.fee, obj.currency)

    @admin.display(description="Net", ordering="net")
    def net_display(self, obj: BalanceTransaction) -> str:
        return format_money(obj.net, obj.currency)

    @admin.display(description="Source", ordering="source")
    def source_display(self, obj: BalanceTransaction) -> str:
        return clipped(obj.source)

    @admin.display(description="Payout", ordering="payout")
    def payout_display(self, obj: BalanceTransaction) -> str:
        return linked("ledger_app_payout_change", obj.payout)


@admin.register(Payout)
class PayoutAdmin(AmountColumn, ReadOnlyAdmin):
    """Money the provider sent to the bank account (negative: took from it), each with the
    balance transactions it paid out."""

    list_display = [
        "id_display",
        "status",
        "amount_display",
        "arrival_date",
        "created",
        "paid_out_display",
    ]
    list_filter = ["status", CurrencyFilter]
    search_fields = ["id"]
    search_help_text = "A payout id, exactly."
    ordering = ["-created", "-id"]
    fields = [
        "id",
        "amount_display",
        "currency",
        "status",
        "type",
        "method",
        "automatic",
        "description",
        "arrival_date",
        "created",
        "balance_transaction",
        "paid_out_display",
        "fetched_at",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "pk")

    @admin.display(description="ID", ordering="id")
    def id_display(self, obj: Payout) -> str:
        return clipped(obj.pk)

    @admin.display(description="Paid out")
    def paid_out_display(self, obj: Payout) -> str:
        """A link to the balance transactions this payout paid out (their list, searched)."""
        url = reverse("admin:ledger_app_balancetransaction_changelist")
        return format_html(
            '<a href="{}?{}">Balance transactions</a>', url, urlencode({"q": obj.pk})
        )
