"""Four eyes in the admin: the queue of refunds over their requester's limit, where someone
with the approve permission (a support lead) approves or rejects them, and the limits.

Every decision goes through ledger_app.approvals.services, one refund at a time: the
service, not this page, refuses a requester deciding their own refund, a refund someone
else decided first, or one past its expiry.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import cast

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import DatabaseError, models

from ledger_app import errors
from ledger_app.access.models import ApiKey
from ledger_app.access.time_zones import shown_time
from ledger_app.admin.base import ReadOnlyAdmin, clipped, report_grouped, totals_by_currency
from ledger_app.admin.change_log import AccessChangeLog
from ledger_app.admin.forms import ApproveForm, RejectForm
from ledger_app.admin.limit_form import RefundLimitForm
from ledger_app.admin.refunds import (
    MAX_SELECTED,
    RefundAdmin,
    requested_by,
    selected_refunds,
)
from ledger_app.approvals.models import RefundApproval, RefundLimit
from ledger_app.approvals.services import approve_refund, reject_refund
from ledger_app.db import connection_lost, drop_broken_connection
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.text import has_unstorable_characters

log = logging.getLogger("ledger_app.admin")


class Decision(models.TextChoices):
    """What became of one selected refund when it was approved or rejected. The label is
    what the person is told."""

    SUCCEEDED = "succeeded", "Approved and refunded"
    PENDING = "pending", "Approved, waiting for the provider"
    UNKNOWN = "unknown", "Approved, provider outcome unknown (the reconciler will ask)"
    FAILED = (
        "failed",
        "Approved, but declined by the provider (amount released; see the needs-attention queue)",
    )
    REJECTED = "rejected", "Rejected: canceled, amount released"
    EXPIRED = (
        "expired",
        "Not approved in time: canceled, amount released (approval_expired)",
    )
    DECIDED = (
        "decided",
        "Not decided here, because it is no longer awaiting approval "
        "(refund_not_awaiting_approval)",
    )
    REFUSED = "refused", "Refused"
    INTERRUPTED = (
        "interrupted",
        "The database did not answer; these may or may not be decided: look at each refund "
        "(database_unavailable)",
    )


# How a decision is told, in this order.
DECISIONS = [
    (Decision.SUCCEEDED, messages.SUCCESS),
    (Decision.PENDING, messages.INFO),
    (Decision.UNKNOWN, messages.WARNING),
    (Decision.FAILED, messages.ERROR),
    (Decision.REJECTED, messages.SUCCESS),
    (Decision.EXPIRED, messages.WARNING),
    (Decision.DECIDED, messages.WARNING),
    (Decision.REFUSED, messages.ERROR),
    (Decision.INTERRUPTED, messages.ERROR),
]
# An approved refund's status once the send (inline, within its budget) has answered.
APPROVED: dict[str, Decision] = {
    Refund.Status.SUCCEEDED: Decision.SUCCEEDED,
    Refund.Status.PENDING: Decision.PENDING,
    Refund.Status.UNKNOWN: Decision.UNKNOWN,
    Refund.Status.FAILED: Decision.FAILED,
}


@admin.register(RefundApproval)
class RefundApprovalAdmin(RefundAdmin):
    """Refunds waiting, reserved, for a lead: soonest to expire first."""

    # What a lead decides on first; the charge and when it was asked for after.
    list_display = [
        "id",
        "amount_display",
        "requester",
        "reason",
        "expires",
        "charge_display",
        "created_at",
    ]
    list_filter = []  # a short queue, worked through: its columns need the width
    ordering = ["approval_expires_at", "id"]  # the partial index refund_awaiting_approval
    actions = ["approve_refunds", "reject_refunds"]
    # Approving sends the refund; rejecting releases its reservation: both need a fresh code.
    money_actions = frozenset(cast(list[str], actions))
    lists_from_replica = False  # worked through: after a decision it shows what is left

    def get_queryset(self, request):
        return super().get_queryset(request).filter(status=Refund.Status.AWAITING_APPROVAL)

    @admin.display(description="Expires", ordering="approval_expires_at")
    def expires(self, obj: Refund) -> str:
        return shown_time(obj.approval_expires_at, empty="-")

    @admin.display(description="Requested by", ordering="actor")
    def requester(self, obj: Refund) -> str:
        return clipped(obj.actor, "text")

    @admin.action(permissions=["approve"], description="Approve…")
    def approve_refunds(self, request, queryset):
        """Approve the selected refunds, each then sent, after a page that shows them."""
        return self._decide(request, queryset, approve=True)

    @admin.action(permissions=["approve"], description="Reject…")
    def reject_refunds(self, request, queryset):
        """Reject the selected refunds with a note, releasing their amounts."""
        return self._decide(request, queryset, approve=False)

    def _decide(self, request, queryset, *, approve: bool):
        refunds = chosen_refunds(request, queryset)
        form_class = ApproveForm if approve else RejectForm
        form = form_class(request.POST if request.POST.get("post") == "yes" else None)
        if form.is_bound and form.is_valid():
            self._decide_each(request, refunds, form.cleaned_data["note"], approve=approve)
            return None
        waiting = [r for r in refunds if r.status == Refund.Status.AWAITING_APPROVAL]
        return self.action_confirmation(
            request,
            "admin/ledger_app/refundapproval/decide.html",
            title="Approve refunds" if approve else "Reject refunds",
            form=form,
            selected=refunds,
            approve=approve,
            action=f"{'approve' if approve else 'reject'}_refunds",
            rows=[
                (r, format_money(r.amount, r.currency), requested_by(r, request.user))
                for r in waiting
            ],
            others=[
                (r, format_money(r.amount, r.currency))
                for r in refunds
                if r.status != Refund.Status.AWAITING_APPROVAL
            ],
            totals=totals_by_currency((r.amount, r.currency) for r in waiting),
        )

    def _decide_each(self, request, refunds: list[Refund], note: str, *, approve: bool) -> None:
        """Each refund through the service on its own; then what became of each, grouped."""
        outcomes: dict[Decision, list[str]] = defaultdict(list)
        for refund in refunds:
            outcome, line = self._decide_one(request, refund, note, approve=approve)
            outcomes[outcome].append(line)
        report_grouped(self, request, outcomes, DECISIONS, noun=("refund", "refunds"))
        if not refunds:
            self.message_user(request, "No refunds were selected.", messages.WARNING)

    def _decide_one(
        self, request, refund: Refund, note: str, *, approve: bool
    ) -> tuple[Decision, str]:
        amount = format_money(refund.amount, refund.currency)
        line = f"{refund.pk} {amount}"
        because = f": {note}" if note else ""
        try:
            if approve:
                decided = approve_refund(refund_id=refund.pk, approver=request.user, note=note)
            else:
                decided = reject_refund(refund_id=refund.pk, approver=request.user, note=note)
        except errors.ApprovalExpired:
            self.log_change(
                request, refund, f"Approval of {amount} expired: canceled, amount released."
            )
            return Decision.EXPIRED, line
        except errors.RefundNotAwaitingApproval:
            return Decision.DECIDED, f"{line} ({now_is(refund.pk)})"
        except errors.LedgerError as exc:
            return Decision.REFUSED, f"{line} ({exc.code})"
        except DatabaseError as exc:
            if not connection_lost(exc):
                raise
            log.exception("database unavailable while deciding refund %s", refund.pk)
            drop_broken_connection()
            return Decision.INTERRUPTED, line
        if not approve:
            self.log_change(request, refund, f"Rejected {amount}{because}")
            return Decision.REJECTED, line
        self.log_change(request, refund, f"Approved {amount}, now {decided.status}{because}")
        return APPROVED.get(decided.status, Decision.PENDING), f"{line}: {decided.status}"


def chosen_refunds(request, queryset) -> list[Refund]:
    """The refunds an approve or reject was asked about, at most MAX_SELECTED, in id order.

    By the ids posted, not only those still in the queue: a refund someone else decided
    after the list was drawn is then told as such, rather than silently left out."""
    if request.POST.get("select_across") == "1":  # "select all" across the queue's pages
        return selected_refunds(queryset)
    ids = [
        pk
        for pk in request.POST.getlist(ACTION_CHECKBOX_NAME)
        if len(pk) <= 64 and not has_unstorable_characters(pk)
    ]
    return list(Refund.objects.filter(pk__in=ids[:MAX_SELECTED]).order_by("pk"))


def now_is(refund_id: str) -> str:
    """What a refund that is no longer awaiting approval is now, and who decided it."""
    status, by = Refund.objects.filter(pk=refund_id).values_list("status", "decided_by").get()
    return f"{status} by {by}" if by else status


@admin.register(RefundLimit)
class RefundLimitAdmin(AccessChangeLog, ReadOnlyAdmin):
    """Limits per group, user or API key and currency: added, changed and deleted by those
    with the model's own permissions (superusers), looked at by support leads. Every change
    is logged with before and after (change_log.py)."""

    form = RefundLimitForm
    audited_fields = ("group", "user", "api_key", "currency", "per_refund", "per_day")
    list_display = ["subject", "currency_display", "per_refund_display", "per_day_display"]
    list_filter = ["currency"]
    list_select_related = ["group", "user", "api_key"]
    ordering = ["group__name", "user__username", "api_key__name", "currency"]
    raw_id_fields = ["user"]  # there may be many users; groups and keys are few

    # The real permissions, not ReadOnlyAdmin's "never": limits are set by hand.
    def has_add_permission(self, request, obj=None):
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_change_permission(self, request, obj=None):
        return admin.ModelAdmin.has_change_permission(self, request, obj)

    def has_delete_permission(self, request, obj=None):
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def audited_value(self, obj: RefundLimit, name: str) -> str:
        if name in ("per_refund", "per_day"):
            return no_limit_or(getattr(obj, name), obj.currency)
        if name == "currency":
            return obj.currency.upper()
        return super().audited_value(obj, name)

    @admin.display(description="Applies to")
    def subject(self, obj: RefundLimit) -> str:
        if obj.group_id is not None:
            return clipped(f"Group: {obj.group.name}", "wide")  # type: ignore[union-attr]
        if obj.user_id is not None:
            return clipped(f"User: {obj.user.get_username()}", "wide")  # type: ignore[union-attr]
        key = cast(ApiKey, obj.api_key)  # one of the three is set (a check constraint)
        return clipped(f"API key: {key.name} ({key.prefix})", "wide")

    @admin.display(description="Currency", ordering="currency")
    def currency_display(self, obj: RefundLimit) -> str:
        return obj.currency.upper()

    @admin.display(description="Per refund", ordering="per_refund")
    def per_refund_display(self, obj: RefundLimit) -> str:
        return no_limit_or(obj.per_refund, obj.currency)

    @admin.display(description="Per day", ordering="per_day")
    def per_day_display(self, obj: RefundLimit) -> str:
        return no_limit_or(obj.per_day, obj.currency)


def no_limit_or(amount: int | None, currency: str) -> str:
    return "no limit" if amount is None else format_money(amount, currency)
