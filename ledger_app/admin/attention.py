""" "Refunds needing attention": the queue support works through, and its actions."""

from __future__ import annotations

from django.contrib import admin, messages

from ledger_app.admin.filters import ReasonFilter
from ledger_app.admin.forms import HandledForm
from ledger_app.admin.refunds import RefundAdmin, selected_refunds
from ledger_app.approvals.attention import mark_refund_handled
from ledger_app.approvals.models import RefundAttention
from ledger_app.counts import count_of
from ledger_app.errors import LedgerError
from ledger_app.money import format_money
from ledger_app.provider.dispatch import send_refund
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import needing_attention
from ledger_app.refunds.services import actor_label

# What each step of the guarded send means to the person who pressed the button.
STEP_WORDS = {
    "sent": "sent to the provider",
    "looked_up": "the provider already had it, nothing was sent",
    "no_answer": "the provider could not say, nothing was sent; try again after the lease",
    "busy": "another process is sending it right now, nothing was done",
    "final": "already settled, nothing was done",
}


@admin.register(RefundAttention)
class RefundAttentionAdmin(RefundAdmin):
    """The queue support works through: outcomes unknown, declines, stuck dispatches.

    Every button that can reach the provider goes through send_refund (lease, attempt on
    record, lookup before any resend); a decline leaves the queue only when someone with
    the refund permission marks it handled with a note.
    """

    list_filter = [
        "status",
        ("reason", ReasonFilter),
        "source",
        ("created_at", admin.DateFieldListFilter),
    ]
    list_display = [
        "id",
        "status",
        "amount_display",
        "detail_display",
        "dispatch_attempts",
        "created_at",
    ]
    actions = ["reconcile_now", "retry_dispatch", "mark_handled"]
    money_actions = frozenset({"reconcile_now", "retry_dispatch"})  # both may send a refund
    # The queue is worked through: after an action it shows what is left, from the primary.
    lists_from_replica = False

    def get_queryset(self, request):
        return super().get_queryset(request).filter(needing_attention())

    def get_actions(self, request):
        """Offer only what makes sense for the rows shown: nothing is resent or asked about
        for declines, and only declines can be marked handled."""
        actions = super().get_actions(request)
        status = request.GET.get("status__exact")
        if status == Refund.Status.FAILED:
            actions.pop("reconcile_now", None)
            actions.pop("retry_dispatch", None)
        elif status in Refund.OPEN_STATUSES:
            actions.pop("mark_handled", None)
        return actions

    @admin.action(permissions=["refund"], description="Reconcile now (ask the provider first)")
    def reconcile_now(self, request, queryset):
        self._send_each(request, queryset, ask_first=True, verb="Reconcile now")

    @admin.action(
        permissions=["refund"],
        description="Retry dispatch (same provider key; asks first if it may have been sent)",
    )
    def retry_dispatch(self, request, queryset):
        self._send_each(request, queryset, ask_first=False, verb="Retry dispatch")

    def _send_each(self, request, queryset, *, ask_first: bool, verb: str) -> None:
        actor = actor_label(request.user)
        done, skipped = [], []
        for refund in selected_refunds(queryset):
            if refund.status not in Refund.OPEN_STATUSES:
                skipped.append(f"{refund.pk} ({refund.status})")
                continue
            sent = send_refund(refund.pk, ask_first=ask_first, actor=actor)
            amount = format_money(refund.amount, refund.currency)
            line = f"{refund.pk} {amount}: {sent.item.status} ({STEP_WORDS[sent.step]})"
            if sent.acted:
                self.log_change(request, refund, f"{verb}: {line}")
            done.append(line)
        if done:
            self.message_user(
                request, f"{verb}: {count_of(len(done), 'refund')} — " + "; ".join(done)
            )
        if skipped:
            self.message_user(
                request,
                "Not sent or asked about, because the provider already declined them (mark "
                "them handled, or make a new refund on the charge): "
                f"{count_of(len(skipped), 'refund')} — " + ", ".join(skipped),
                messages.WARNING,
            )
        if not done and not skipped:
            self.message_user(request, "Nothing to do for the selected refunds.", messages.INFO)

    @admin.action(permissions=["refund"], description="Mark declined refunds handled…")
    def mark_handled(self, request, queryset):
        """Close declines support has dealt with, after a page that asks what was done."""
        refunds = selected_refunds(queryset)
        declined = [r for r in refunds if r.status == Refund.Status.FAILED]
        others = [r for r in refunds if r.status != Refund.Status.FAILED]
        form = HandledForm(request.POST if request.POST.get("post") == "yes" else None)
        if form.is_bound and form.is_valid():
            self._mark_each_handled(request, declined, others, form.cleaned_data["note"])
            return None
        return self.action_confirmation(
            request,
            "admin/ledger_app/refundattention/mark_handled.html",
            title="Mark declined refunds handled",
            form=form,
            selected=refunds,
            declined=[(r, format_money(r.amount, r.currency)) for r in declined],
            others=[(r, format_money(r.amount, r.currency)) for r in others],
        )

    def _mark_each_handled(
        self, request, declined: list[Refund], others: list[Refund], note: str
    ) -> None:
        """Mark each decline handled with the note, then say which were and which not."""
        actor = actor_label(request.user)
        handled, refused = [], []
        for refund in declined:
            try:
                mark_refund_handled(refund_id=refund.pk, note=note, actor=actor)
            except LedgerError as exc:
                refused.append(f"{refund.pk} ({exc.code})")
                continue
            self.log_change(request, refund, f"Marked handled: {note}")
            handled.append(refund.pk)
        if handled:
            self.message_user(
                request,
                f"Marked handled: {count_of(len(handled), 'refund')} — {', '.join(handled)}",
                messages.SUCCESS,
            )
        if refused or others:
            not_done = refused + [f"{r.pk} ({r.status})" for r in others]
            self.message_user(
                request,
                "Not marked handled (only declines can be; the others are settled by asking "
                f"the provider): {count_of(len(not_done), 'refund')} — {', '.join(not_done)}",
                messages.WARNING,
            )
