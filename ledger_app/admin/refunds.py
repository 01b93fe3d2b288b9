"""Refunds in the admin: the list, a refund's page, and what the queues built on it share."""

from __future__ import annotations

from django.contrib import admin

from ledger_app.admin.base import AmountColumn, ReadOnlyAdmin, clipped
from ledger_app.admin.export import CsvExport
from ledger_app.admin.filters import CurrencyFilter, IssuedByFilter, ReasonFilter, exact_id_search
from ledger_app.models import Refund
from ledger_app.replica import ListsFromReplica
from ledger_app.services.approvals import APPROVE_PERMISSION
from ledger_app.services.refunds import actor_label

MAX_SELECTED = 500  # refunds one queue action acts on

# A refund's fields, once, in the order its page shows them and its CSV export writes them.
FIELDS = (
    "id",
    "charge",
    "amount",
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
    "destination_reference",
    "dispatch_attempts",
    "leased_until",
    "handled_at",
    "handled_by",
    "handled_note",
    "approval_expires_at",
    "decided_at",
    "decided_by",
    "decision_note",
    "created_at",
    "updated_at",
)
# The page shows the amount in its currency's format and the card reference with what it
# waits for; the export writes the amount both in minor units and formatted, the reference
# as stored, and leaves out the lease (a sender's moment, not the refund's).
ON_PAGE = {"amount": "amount_display", "destination_reference": "reference_display"}
SHOWN = [ON_PAGE.get(name, name) for name in FIELDS]
EXPORTED = tuple(
    column
    for name in FIELDS
    if name != "leased_until"
    for column in (("amount", "amount_formatted") if name == "amount" else (name,))
)


@admin.register(Refund)
class RefundAdmin(CsvExport, ListsFromReplica, AmountColumn, ReadOnlyAdmin):
    """The list (GET) may read the replica; a refund's page reads the primary."""

    export_columns = EXPORTED  # export.py: the list as CSV

    # Which refund, where it stands and how much first (a phone shows these without
    # scrolling); reason, source, note and the rest are on the refund's page.
    list_display = [
        "id",
        "status",
        "amount_display",
        "charge_display",
        "created_at",
        "actor_display",
    ]
    list_filter = [
        "status",
        ("reason", ReasonFilter),
        "source",
        CurrencyFilter,  # a refund's currency is its charge's: the same short list
        IssuedByFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["id"]
    search_help_text = "A refund id, a charge id or a provider key, exactly."
    # A charge's refunds (charge_history.history_table) and the dashboard's figures link here.
    linked_lookups = ("charge__id__exact", "status__in")
    ordering = ["-created_at", "-id"]
    list_select_related = ["charge"]
    raw_id_fields = ["charge", "created_by"]
    readonly_fields = SHOWN
    fields = readonly_fields  # type: ignore[assignment]  # names only, as the base allows
    change_form_template = "admin/ledger_app/refund/change_form.html"

    def has_approve_permission(self, request, obj=None) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    @admin.display(description="Charge", ordering="charge_id")
    def charge_display(self, obj: Refund) -> str:
        return clipped(obj.charge_id)

    @admin.display(description="By", ordering="actor")
    def actor_display(self, obj: Refund) -> str:
        return clipped(obj.actor, "text")

    @admin.display(description="Card network reference (ARN)")
    def reference_display(self, obj: Refund) -> str:
        """What support reads out to a customer whose bank traces the refund: the card
        network's acquirer reference number, once the provider has given it."""
        if obj.destination_reference:
            return obj.destination_reference
        if obj.status == Refund.Status.SUCCEEDED:
            return "pending from the card network"
        return self.get_empty_value_display()  # no card reference to wait for

    @admin.display(description="Status detail")
    def detail_display(self, obj: Refund) -> str:
        return clipped(obj.status_detail, "text")

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        """A refund awaiting approval offers "Approve…" and "Reject…" (the queue's actions,
        for this one refund) to those who may decide it: not to the person who asked."""
        context["decision_offered"] = (
            obj is not None
            and obj.status == Refund.Status.AWAITING_APPROVAL
            and self.has_approve_permission(request)
            and not requested_by(obj, request.user)
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "pk", "charge_id", "provider_idempotency_key")


def requested_by(refund: Refund, user) -> bool:
    """Whether `user` asked for this refund (and so may not decide it)."""
    return refund.created_by_id == user.pk or refund.actor == actor_label(user)


def selected_refunds(queryset) -> list[Refund]:
    """The refunds an action was asked to act on (at most MAX_SELECTED), in id order."""
    return list(Refund.objects.filter(pk__in=queryset.values("pk")).order_by("pk")[:MAX_SELECTED])
