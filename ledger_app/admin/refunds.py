"""Refunds, their ledger and keys in the admin: read-only, fast, and a queue of stuck ones."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from ledger_app.admin.base import AmountColumn, ReadOnlyAdmin, clipped, clipped_lines
from ledger_app.admin.charges import CurrencyFilter
from ledger_app.admin.export import CsvExport
from ledger_app.admin.forms import HandledForm
from ledger_app.errors import LedgerError
from ledger_app.models import ApiKey, IdempotencyRecord, LedgerEntry, Refund, RefundAttention
from ledger_app.money import format_money
from ledger_app.replica import ListsFromReplica
from ledger_app.selectors import needing_attention
from ledger_app.services.approvals import APPROVE_PERMISSION
from ledger_app.services.attention import mark_refund_handled
from ledger_app.services.dispatch import send_refund
from ledger_app.services.refunds import actor_label
from ledger_app.services.text import has_unstorable_characters
from ledger_app.wording import NO_REASON, count_of

MAX_SELECTED = 500  # refunds one queue action acts on


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


class ReasonFilter(admin.ChoicesFieldListFilter):
    """The reason filter with "No reason" too, for refunds made without one (stored as ""):
    the home page's chart links to them, and the list says so."""

    def get_facet_counts(self, pk_attname, filtered_qs):
        counts = super().get_facet_counts(pk_attname, filtered_qs)
        return counts | {"none__c": Count(pk_attname, filter=Q(**{self.lookup_kwarg: ""}))}

    def choices(self, changelist):
        yield from super().choices(changelist)
        title = NO_REASON
        if changelist.add_facets:
            title = f"{title} ({self.get_facet_queryset(changelist)['none__c']})"
        yield {
            "selected": self.lookup_val is not None and "" in self.lookup_val,
            "query_string": changelist.get_query_string(
                {self.lookup_kwarg: ""}, [self.lookup_kwarg_isnull]
            ),
            "display": title,
        }


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
class RefundAdmin(CsvExport, ListsFromReplica, AmountColumn, ReadOnlyAdmin):
    """The list (GET) may read the replica; a refund's page reads the primary."""

    export_columns = (  # export.py: the list as CSV
        "id",
        "charge",
        "amount",
        "amount_formatted",
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
    # A charge's refunds (charges.history_table) and the dashboard's figures link here.
    linked_lookups = ("charge__id__exact", "status__in")
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
        "handled_at",
        "handled_by",
        "handled_note",
        "approval_expires_at",
        "decided_at",
        "decided_by",
        "decision_note",
        "created_at",
        "updated_at",
    ]
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


def requested_by(refund: Refund, user) -> bool:
    """Whether `user` asked for this refund (and so may not decide it)."""
    return refund.created_by_id == user.pk or refund.actor == actor_label(user)


def selected_refunds(queryset) -> list[Refund]:
    """The refunds an action was asked to act on (at most MAX_SELECTED), in id order."""
    return list(Refund.objects.filter(pk__in=queryset.values("pk")).order_by("pk")[:MAX_SELECTED])


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
    linked_lookups = ("charge__id__exact",)  # a charge's entries (charges.history_table)
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


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ["key_display", "operation", "refund_display", "charge_display", "created_at"]
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

    list_display = ["name_display", "prefix", "read_only", "created_at", "revoked_at"]
    list_filter = ["read_only"]
    fields = ["name", "prefix", "read_only", "created_at", "revoked_at"]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="Name", ordering="name")
    def name_display(self, obj: ApiKey) -> str:
        return clipped(obj.name, "text")
