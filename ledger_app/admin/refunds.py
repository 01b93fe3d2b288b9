"""Refunds in the admin: the list, a refund's page, and what the queues built on it share."""

from __future__ import annotations

import logging
from collections import defaultdict

from django import forms
from django.contrib import admin, messages
from django.db import DatabaseError, models
from typing_extensions import override

from ledger_app import errors
from ledger_app.admin.base import (
    AmountColumn,
    ReadOnlyAdmin,
    clipped,
    report_grouped,
    totals_by_currency,
)
from ledger_app.admin.customer_mails import MAIL_FIELDS, CustomerMailViews
from ledger_app.admin.export import CsvExport
from ledger_app.admin.filters import CurrencyFilter, IssuedByFilter, ReasonFilter, exact_id_search
from ledger_app.approvals.services import APPROVE_PERMISSION, cancel_refund
from ledger_app.db import connection_lost, drop_broken_connection
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import actor_label
from ledger_app.replica import ListsFromReplica

log = logging.getLogger("ledger_app.admin")

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


class Canceled(models.TextChoices):
    """What became of one refund selected for "Cancel my request…". The label is what the
    person is told."""

    CANCELED = "canceled", "Canceled at your request: amount released, nothing sent"
    NOT_YOURS = (
        "not_yours",
        "Not canceled, because you did not ask for it (a support lead rejects it instead, "
        "with a note) (refund_not_cancelable)",
    )
    NOT_WAITING = (
        "not_waiting",
        "Not canceled, because it is no longer awaiting approval (refund_not_cancelable)",
    )
    REFUSED = "refused", "Refused"
    INTERRUPTED = (
        "interrupted",
        "The database did not answer; these may or may not be canceled: look at each refund "
        "(database_unavailable)",
    )


# How a cancel is told, in this order.
CANCEL_OUTCOMES = [
    (Canceled.CANCELED, messages.SUCCESS),
    (Canceled.NOT_WAITING, messages.WARNING),
    (Canceled.NOT_YOURS, messages.ERROR),
    (Canceled.REFUSED, messages.ERROR),
    (Canceled.INTERRUPTED, messages.ERROR),
]


@admin.register(Refund)
class RefundAdmin(CustomerMailViews, CsvExport, ListsFromReplica, AmountColumn, ReadOnlyAdmin):
    """The list (GET) may read the replica; a refund's page reads the primary, and shows
    its customer mails after its own fields (customer_mails.py)."""

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
    readonly_fields = [*SHOWN, *MAIL_FIELDS]
    fields = readonly_fields  # type: ignore[assignment]  # names only, as the base allows
    change_form_template = "admin/ledger_app/refund/change_form.html"
    # The queues built on this admin (approvals.py, attention.py) name their own actions.
    actions = ["cancel_own_requests"]
    # Canceling releases a reservation, as rejecting does: it needs a fresh code, and one
    # that went through restarts the idle clock (second_factor.py).
    money_actions = frozenset({"cancel_own_requests"})

    def has_approve_permission(self, request, obj=None) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def has_cancel_own_permission(self, request, obj=None) -> bool:
        """Offered to those who may ask for refunds: only they have requests to take back."""
        return self.has_refund_permission(request)

    @admin.action(permissions=["cancel_own"], description="Cancel my request…")
    def cancel_own_requests(self, request, queryset):
        """Take back refunds you asked for that still await approval: canceled, their
        amounts released, nothing sent; after a page that shows them. Only your own: a
        support lead deciding someone else's request rejects it (with a note) instead, so
        the admin refuses a lead's cancel of a refund they did not ask for, although the
        service (cancel_refund) would allow it."""
        refunds = selected_refunds(queryset)
        if request.POST.get("post") == "yes":
            self._cancel_each(request, refunds)
            return None
        mine = [r for r in refunds if asked_for_by(r, request.user)]
        rows = [r for r in mine if r.status == Refund.Status.AWAITING_APPROVAL]
        return self.action_confirmation(
            request,
            "admin/ledger_app/refund/cancel_own.html",
            title="Cancel my refund requests",
            form=forms.Form(),
            selected=refunds,
            action="cancel_own_requests",
            rows=[(r, format_money(r.amount, r.currency)) for r in rows],
            others=[
                (r, format_money(r.amount, r.currency), r in mine) for r in refunds if r not in rows
            ],
            totals=totals_by_currency((r.amount, r.currency) for r in rows),
        )

    def _cancel_each(self, request, refunds: list[Refund]) -> None:
        """Each refund through the service on its own; then what became of each, grouped."""
        outcomes: dict[Canceled, list[str]] = defaultdict(list)
        for refund in refunds:
            outcome, line = self._cancel_one(request, refund)
            outcomes[outcome].append(line)
        report_grouped(self, request, outcomes, CANCEL_OUTCOMES, noun=("refund", "refunds"))
        if not refunds:
            self.message_user(request, "No refunds were selected.", messages.WARNING)

    def _cancel_one(self, request, refund: Refund) -> tuple[Canceled, str]:
        amount = format_money(refund.amount, refund.currency)
        line = f"{refund.pk} {amount}"
        if not asked_for_by(refund, request.user):
            return Canceled.NOT_YOURS, line
        try:
            cancel_refund(refund_id=refund.pk, actor=request.user)
        except errors.RefundNotCancelable:
            return Canceled.NOT_WAITING, f"{line} ({status_now(refund.pk)})"
        except errors.LedgerError as exc:
            return Canceled.REFUSED, f"{line} ({exc.code})"
        except DatabaseError as exc:
            if not connection_lost(exc):
                raise
            log.exception("database unavailable while canceling refund %s", refund.pk)
            drop_broken_connection()
            return Canceled.INTERRUPTED, line
        self.log_change(request, refund, f"Canceled my request for {amount}: amount released")
        return Canceled.CANCELED, line

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

    @override  # the signature is ModelAdmin's
    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        """A refund awaiting approval offers "Approve…" and "Reject…" (the queue's actions,
        for this one refund) to those who may decide it: not to the person who asked..."""
        waiting = obj is not None and obj.status == Refund.Status.AWAITING_APPROVAL
        context["decision_offered"] = (
            waiting and self.has_approve_permission(request) and not requested_by(obj, request.user)
        )
        # ...and "Cancel my request…" to the person who asked for it (lead or not).
        context["cancel_offered"] = (
            waiting and self.has_cancel_own_permission(request) and asked_for_by(obj, request.user)
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_search_results(self, request, queryset, search_term):
        return exact_id_search(queryset, search_term, "pk", "charge_id", "provider_idempotency_key")


def requested_by(refund: Refund, user) -> bool:
    """Whether `user` asked for this refund (and so may not decide it)."""
    return refund.created_by_id == user.pk or refund.actor == actor_label(user)


def asked_for_by(refund: Refund, user) -> bool:
    """Whether `user` is the person who asked for this refund, as cancel_refund reads it:
    by their user, not by a name (an API key's refund has no person)."""
    return refund.created_by_id is not None and refund.created_by_id == user.pk


def status_now(refund_id: str) -> str:
    """What a refund that can no longer be canceled is now, and who decided it."""
    status, by = Refund.objects.filter(pk=refund_id).values_list("status", "decided_by").get()
    return f"{status} by {by}" if by else status


def selected_refunds(queryset) -> list[Refund]:
    """The refunds an action was asked to act on (at most MAX_SELECTED), in id order."""
    return list(Refund.objects.filter(pk__in=queryset.values("pk")).order_by("pk")[:MAX_SELECTED])
