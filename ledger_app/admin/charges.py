"""Charges in the admin: find them fast, read their history, refund them safely."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import cache
from typing import cast

from babel.numbers import get_currency_precision, list_currencies
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote, unquote
from django.core.cache import cache as django_cache
from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError, models
from django.db.models import F, Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from backoffice.time_zones import shown_time
from ledger_app.admin.base import (
    AmountColumn,
    ReadOnlyAdmin,
    clipped,
    clipped_lines,
    report_grouped,
    totals_by_currency,
)
from ledger_app.admin.export import CsvExport
from ledger_app.admin.forms import (
    FORM_KEY,
    BulkRefundForm,
    ReasonAndNote,
    RefundForm,
    new_form_key,
)
from ledger_app.admin.second_factor import second_factor_gate, take_held_form
from ledger_app.db import drop_broken_connection
from ledger_app.errors import ChargeChanged, IdempotencyKeyReused, LedgerError, RepeatOfEarlier
from ledger_app.models import Charge, Refund
from ledger_app.money import MAJOR_AMOUNT, format_money
from ledger_app.replica import ListsFromReplica
from ledger_app.selectors import (
    charge_state,
    charge_states,
    charges_refunded_since,
    idempotency_record,
)
from ledger_app.services.idempotency import ADMIN_BULK_KEYS, ADMIN_FORM_KEYS, Created
from ledger_app.services.limits import limits_for, spent_today
from ledger_app.services.refunds import actor_label, create_refund
from ledger_app.services.text import has_unstorable_characters

log = logging.getLogger("ledger_app.admin")

MAX_BULK = 500  # charges one bulk action may refund
# Shown when a refund's transaction lost the database: it may have committed or not.
DATABASE_UNAVAILABLE = (
    "The database did not answer, so this refund may or may not have been made. Submit this "
    "same form again: it carries the same key, so it finishes or replays the refund and never "
    "makes a second one (database_unavailable)."
)
SHOWN_ON_PAGE = 20  # refunds and ledger entries listed on a charge page


class RefundStateFilter(admin.SimpleListFilter):
    title = "refund state"
    parameter_name = "refunded"

    def lookups(self, request, model_admin):
        return [
            ("none", "Not refunded"),
            ("partial", "Partly refunded"),
            ("full", "Fully refunded"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "none":
            return queryset.filter(amount_refunded=0)
        if self.value() == "partial":
            return queryset.filter(amount_refunded__gt=0, amount_refunded__lt=F("amount"))
        if self.value() == "full":
            return queryset.filter(amount_refunded=F("amount"))
        return queryset


class CurrencyFilter(admin.SimpleListFilter):
    """The currencies in use, looked up at most every ten minutes, not on every page."""

    title = "currency"
    parameter_name = "currency"

    def lookups(self, request, model_admin):
        currencies = django_cache.get_or_set(
            "admin:charge-currencies",
            lambda: list(
                Charge.objects.order_by().values_list("currency", flat=True).distinct()[:50]
            ),
            600,
        )
        # The chosen currency is always a choice: a filter with no choices is not applied,
        # and the cached list may predate the first charge in that currency.
        chosen = {self.value()} if self.value() else set()
        return [(c, c.upper()) for c in sorted({*currencies, *chosen})]

    def queryset(self, request, queryset):
        return queryset.filter(currency=self.value()) if self.value() else queryset


@cache
def currencies_by_exponent() -> dict[int, list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for code in list_currencies():
        groups[get_currency_precision(code)].append(code.lower())
    return dict(groups)


def amount_search(term: str) -> Q | None:
    """'12.34' finds $12.34 and €12.34 (1234 minor units) and ¥1234 when whole."""
    if not MAJOR_AMOUNT.match(term):
        return None
    value = Decimal(term.replace(",", ""))
    query = Q()
    for exponent, codes in currencies_by_exponent().items():
        minor = value.scaleb(exponent)
        if minor == minor.to_integral_value() and 0 < minor < 2**63:
            query |= Q(amount=int(minor), currency__in=codes)
    return query or None


@admin.register(Charge)
class ChargeAdmin(CsvExport, ListsFromReplica, AmountColumn, ReadOnlyAdmin):
    """The list (GET) may read the replica; the charge page, the refund form and the bulk
    refund action (a POST to the list) read and write the primary."""

    export_columns = (  # export.py: the list as CSV
        "id",
        "amount",
        "amount_formatted",
        "amount_refunded",
        "amount_refunded_formatted",
        "currency",
        "status",
        "status_detail",
        "customer",
        "description",
        "metadata",
        "provider_charge_id",
        "provider_idempotency_key",
        "dispatch_attempts",
        "created_at",
        "updated_at",
    )

    # What an agent acts on first (also the first columns a phone shows), then what tells
    # charges apart; the rest is on the charge's page.
    list_display = [
        "id_display",
        "status",
        "amount_and_refunded",
        "refundable_display",
        "created_at",
        "customer_and_description",
    ]
    list_filter = [
        "status",
        CurrencyFilter,
        RefundStateFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["id"]  # see get_search_results
    search_help_text = (
        "Matches exactly: a whole charge id (ch_…), a whole customer reference, or an amount "
        "(12.34). Matches partly: description text."
    )
    ordering = ["-created_at", "-id"]
    actions = ["refund_in_full"]
    money_actions = frozenset(cast(list[str], actions))
    change_form_template = "admin/ledger_app/charge/change_form.html"
    fields = [
        "id",
        "status",
        "amount_display",
        "refunded_display",
        "refundable_display",
        "currency",
        "customer",
        "description",
        "metadata",
        "provider_charge_id",
        "status_detail",
        "created_at",
        "refund_history",
        "ledger_history",
        "admin_history",
    ]
    readonly_fields = fields  # type: ignore[assignment]  # names only, as the base allows

    @admin.display(description="ID", ordering="id")
    def id_display(self, obj: Charge) -> str:
        return clipped(obj.pk)  # ids made here fit; imported ones may be up to 64 characters

    @admin.display(description="Amount / refunded", ordering="amount")
    def amount_and_refunded(self, obj: Charge) -> str:
        """The amount, and under it what was refunded of it, when anything was."""
        amount = format_money(obj.amount, obj.currency)
        if not obj.amount_refunded:
            return amount
        refunded = format_money(obj.amount_refunded, obj.currency)
        return format_html('{}<span class="second-line">{} refunded</span>', amount, refunded)

    @admin.display(description="Customer / description", ordering="customer")
    def customer_and_description(self, obj: Charge) -> str:
        return clipped_lines(obj.customer, obj.description)

    @admin.display(description="Refunded", ordering="amount_refunded")
    def refunded_display(self, obj: Charge) -> str:
        return format_money(obj.amount_refunded, obj.currency)

    @admin.display(description="Refundable")
    def refundable_display(self, obj: Charge) -> str:
        """Only a succeeded charge with something left shows an amount here."""
        if not is_refundable(obj):
            return f"— ({why_not_refundable(obj)})"
        return format_money(obj.amount_refundable, obj.currency)

    @admin.display(description="Refunds")
    def refund_history(self, obj: Charge):
        return refunds_table(obj)

    @admin.display(description="Ledger entries")
    def ledger_history(self, obj: Charge):
        entries = obj.ledger_entries.order_by("-id")[:SHOWN_ON_PAGE]
        return history_table(
            "admin/ledger_app/charge/ledger_history.html",
            [(e, format_money(e.amount, e.currency)) for e in entries],
            "admin:ledger_app_ledgerentry_changelist",
            obj,
        )

    @admin.display(description="Admin history")
    def admin_history(self, obj: Charge):
        entries = list(
            LogEntry.objects.filter(
                content_type__app_label="ledger_app",
                content_type__model="charge",
                object_id=obj.pk,
            )
            .select_related("user")
            .order_by("-action_time")[:SHOWN_ON_PAGE]
        )
        if not entries:
            return "None"
        return render_to_string("admin/ledger_app/charge/admin_history.html", {"entries": entries})

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        if has_unstorable_characters(term) or len(term) > 200:
            return queryset.none(), False
        if term.startswith("ch_"):  # an id: the primary key, nothing else
            return queryset.filter(pk=term), False
        query = Q(customer=term) | Q(description__icontains=term)
        amounts = amount_search(term)
        if amounts is not None:
            query |= amounts
        return queryset.filter(query), False

    # --- refunding ---------------------------------------------------------------------

    def get_urls(self):
        refund_url = path(
            "<path:object_id>/refund/",
            self.admin_site.admin_view(self.refund_view),
            name="ledger_app_charge_refund",
        )
        return [refund_url, *super().get_urls()]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        """The charge page offers "Refund…" to those who may refund, when there is something
        left to refund."""
        context["refund_offered"] = (
            self.has_refund_permission(request) and obj is not None and is_refundable(obj)
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def refund_view(self, request, object_id):
        """One refund from a form that cannot move money twice, whatever the browser does.

        The form's key lives in its URL (`?form=<key>`): a plain GET mints one and redirects
        there, so Back and reload always come back to the same key. A key already used
        shows what it refunded instead of a form; submitting a cached copy replays. The
        form also carries the charge state it was drawn against, and the service refuses
        it if the charge has changed since (a second tab drawn earlier). The amount is
        typed, or is the exact amount left shown on the page: a blank never means "all".
        After a refund the answer is a redirect to the charge (POST/redirect/GET)."""
        if not self.has_refund_permission(request):
            raise PermissionDenied
        denied = second_factor_gate(request)
        if denied is not None:
            return denied
        charge = self._charge_or_404(object_id)
        if request.method == "POST":
            return self._refund_form_submitted(request, charge)
        return self._refund_form_opened(request, charge)

    def _refund_form_opened(self, request, charge: Charge):
        """The form under the key in its URL; without a key, a redirect to a new one."""
        key = f"{ADMIN_FORM_KEYS}:{request.GET.get('form', '')}"
        if not FORM_KEY.match(key):
            return redirect(f"{refund_url(charge)}?{urlencode({'form': uuid.uuid4().hex})}")
        used = refund_made_with(key)
        if used is not None:
            return self._used_form_page(request, charge, used)
        held = take_held_form(request)  # typed before the code page: shown, not submitted
        if held is not None and held.get("idempotency_key") == key:
            return self._refund_form_page(request, charge, RefundForm(held, charge=charge))
        return self._refund_form_page(request, charge, self._fresh_form(charge, key))

    def _refund_form_submitted(self, request, charge: Charge):
        """A valid form goes to the service. An invalid one of a used key shows what the
        key made (e.g. Back, then reload); otherwise it is drawn again with its errors,
        against the charge as it is now, and goes to the service if that makes it valid."""
        form = RefundForm(request.POST, charge=charge)
        key = request.POST.get("idempotency_key", "")
        if not form.is_valid():
            used = refund_made_with(key) if FORM_KEY.match(key) else None
            if used is not None:
                return self._used_form_page(request, charge, used)
            data = request.POST.copy()
            data["charge_state"] = str(charge_state(charge.pk))
            form = RefundForm(data, charge=charge)
            if not form.is_valid():
                return self._refund_form_page(request, charge, form)
        return self._refund_from_form(request, charge, form, key)

    def _refund_from_form(self, request, charge: Charge, form: RefundForm, key: str):
        """The refund a valid form asks for; a refusal is shown on the form."""
        notice = ""
        try:
            result = self._create_refund(
                request,
                charge,
                form,
                amount=form.cleaned_data["amount"],
                key=form.cleaned_data["idempotency_key"],
                state=form.cleaned_data["charge_state"],
                refuse_repeats=not form.refunds_again(),
            )
        except RepeatOfEarlier as exc:
            # Nothing was written and the key is still free: the same form, ticked, refunds.
            form = RefundForm(form.data, charge=charge, earlier=exc.earlier)
            form.is_valid()
        except ChargeChanged as exc:
            # Drawn again from the charge as it is now; the amount is asked for anew.
            charge.refresh_from_db()
            notice = f"{exc.message} ({exc.code})"
            form = self._fresh_form(charge, key, form.cleaned_data)
        except IdempotencyKeyReused as exc:
            used = refund_made_with(key)
            if used is not None:
                return self._used_form_page(request, charge, used, exc.code)
            form.add_error(None, f"{exc.message} ({exc.code})")
        except LedgerError as exc:
            form.add_error(
                exc.param if exc.param in form.fields else None, f"{exc.message} ({exc.code})"
            )
        except (OperationalError, InterfaceError):
            log.exception("database unavailable during an admin refund of %s", charge.pk)
            drop_broken_connection()
            form.add_error(None, DATABASE_UNAVAILABLE)
        else:
            self._report(request, charge, result)
            return redirect("admin:ledger_app_charge_change", quote(charge.pk))
        return self._refund_form_page(request, charge, form, notice)

    def _create_refund(
        self,
        request,
        charge: Charge,
        form: ReasonAndNote,
        *,
        amount: int,
        key: str,
        state: int,
        refuse_repeats: bool,
    ) -> Created[Refund]:
        """A refund through the service, by this person, with the form's reason and note;
        unless the person insisted, refused as repeat_of_earlier when it repeats a live
        refund of the same amount made within REFUND_REPEAT_WINDOW_DAYS."""
        return create_refund(
            charge_id=charge.pk,
            amount=amount,
            idempotency_key=key,
            reason=form.service_reason(),
            note=form.cleaned_data["note"],
            actor=request.user,
            source=Refund.Source.ADMIN,
            unchanged_since=state,
            refuse_repeats_within=repeat_window() if refuse_repeats else None,
        )

    def _fresh_form(self, charge: Charge, key: str, kept: dict | None = None) -> RefundForm:
        kept = kept or {}
        return RefundForm(
            charge=charge,
            initial={
                "idempotency_key": key,
                "charge_state": charge_state(charge.pk),
                "reason": kept.get("reason", ""),
                "note": kept.get("note", ""),
            },
        )

    def _refund_page_context(self, request, charge: Charge) -> dict:
        return {
            **self.page_context(request, f"Refund {charge.pk}"),
            "charge": charge,
            "amount": format_money(charge.amount, charge.currency),
            "refunded": format_money(charge.amount_refunded, charge.currency),
            "refundable": format_money(charge.amount_refundable, charge.currency),
            "refundable_now": is_refundable(charge),
            "refunds": refunds_table(charge),
        }

    def _refund_form_page(self, request, charge: Charge, form: RefundForm, notice: str = ""):
        context = {
            **self._refund_page_context(request, charge),
            "limits": limits_shown(request.user, charge.currency),
            "form": form,
            "notice": notice,
            "repeat_warning": repeat_words(form.earlier) if form.earlier is not None else "",
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/ledger_app/charge/refund_form.html", context)

    def _used_form_page(self, request, charge: Charge, refund: Refund, code: str = ""):
        """What Back, reload or a second tab of an already used form shows: what it did."""
        context = {
            **self._refund_page_context(request, charge),
            "used_refund": refund,
            "used_amount": format_money(refund.amount, refund.currency),
            "code": code,
            "new_form_url": refund_url(charge),
        }
        return TemplateResponse(request, "admin/ledger_app/charge/refund_form_used.html", context)

    def _charge_or_404(self, object_id: str) -> Charge:
        object_id = unquote(object_id)
        if has_unstorable_characters(object_id) or len(object_id) > 64:
            raise Http404
        charge = Charge.objects.filter(pk=object_id).first()
        if charge is None:
            raise Http404
        return charge

    def _report(self, request, charge: Charge, result: Created[Refund]) -> str:
        refund = result.item
        amount = format_money(refund.amount, refund.currency)
        if result.replayed:
            self.message_user(
                request,
                f"Already submitted: this form issued refund {refund.id} of {amount} "
                f"({refund.get_status_display().lower()}) before. Nothing new was refunded.",
                messages.WARNING,
            )
            return "replayed"
        note = f": {refund.note}" if refund.note else ""
        if refund.status == Refund.Status.AWAITING_APPROVAL:
            self.log_change(
                request,
                charge,
                f"Asked for a refund of {amount} as {refund.id} ({reason_words(refund)}), "
                f"awaiting approval (over the limit){note}",
            )
            self.message_user(request, awaiting_approval_words(refund, amount), messages.WARNING)
            return "awaiting_approval"
        self.log_change(
            request, charge, f"Refunded {amount} as {refund.id} ({reason_words(refund)}){note}"
        )
        levels: dict[str, int] = {
            Refund.Status.SUCCEEDED: messages.SUCCESS,
            Refund.Status.FAILED: messages.ERROR,
        }
        level = levels.get(refund.status, messages.WARNING)
        detail = f": {refund.status_detail}" if refund.status_detail else ""
        if refund.status == Refund.Status.PENDING and not detail:
            detail = (
                ": the amount is reserved and the provider has not answered yet; the refund "
                "settles on its own (its page shows the outcome)"
            )
        self.message_user(
            request, f"Refund {refund.id} of {amount}: {refund.status}{detail}.", level
        )
        return "refunded"

    # --- refunding in bulk -------------------------------------------------------------

    @admin.action(permissions=["refund"], description="Refund selected charges in full…")
    def refund_in_full(self, request, queryset):
        """Refund what is left on each selected charge, after a confirmation page.

        Each charge's key is derived from the key minted with the confirmation page, so
        confirming twice replays instead of refunding again.
        """
        charges = list(queryset.order_by("pk")[: MAX_BULK + 1])
        if len(charges) > MAX_BULK:
            self.message_user(
                request, f"Select at most {MAX_BULK} charges at a time.", messages.ERROR
            )
            return None
        refundable = [c for c in charges if is_refundable(c)]
        recent = charges_refunded_since(
            [c.pk for c in refundable], timezone.now() - repeat_window()
        )
        if request.POST.get("post") == "yes":
            form = BulkRefundForm(request.POST, recent=len(recent))
            if form.is_valid():
                self._refund_in_full(request, charges, form)
                return None
        else:
            form = confirmation_form(refundable, recent=len(recent))
        return self._refund_in_full_confirmation(request, charges, refundable, form, recent)

    def _refund_in_full_confirmation(
        self,
        request,
        charges: list[Charge],
        refundable: list[Charge],
        form: BulkRefundForm,
        recent: set[str],
    ):
        return self.action_confirmation(
            request,
            "admin/ledger_app/charge/refund_in_full_confirmation.html",
            title="Refund charges in full",
            form=form,
            selected=charges,
            rows=[
                (
                    c,
                    format_money(c.amount, c.currency),
                    format_money(c.amount_refundable, c.currency),
                )
                for c in refundable
            ],
            not_refundable=[
                (c, format_money(c.amount, c.currency), why_not_refundable(c))
                for c in charges
                if not is_refundable(c)
            ],
            totals=totals_by_currency((c.amount_refundable, c.currency) for c in refundable),
            recently_refunded=[c.pk for c in refundable if c.pk in recent],
            repeat_window_days=f"{settings.REFUND_REPEAT_WINDOW_DAYS:g}",
        )

    def _refund_in_full(self, request, charges: list[Charge], form: BulkRefundForm) -> None:
        """Refund each charge the confirmation page showed, then say what became of each."""
        outcomes: dict[BulkOutcome, list[str]] = defaultdict(list)
        money: dict[BulkOutcome, list[tuple[int, str]]] = defaultdict(list)
        shown = form.cleaned_data["confirmed"]
        for charge in charges:
            if charge.pk not in shown:
                outcome, line = BulkOutcome.SKIPPED, f"{charge.pk} ({why_not_refundable(charge)})"
            else:
                state, amount = shown[charge.pk]
                outcome, line, refund = self._refund_one_in_full(
                    request, charge, form, state, amount
                )
                if refund is not None:
                    money[outcome].append((refund.amount, refund.currency))
            outcomes[outcome].append(line)
        report_grouped(self, request, outcomes, BULK_OUTCOMES, noun=("charge", "charges"))
        if money:
            self.message_user(request, money_words(money), messages.INFO)

    def _refund_one_in_full(
        self, request, charge: Charge, form: BulkRefundForm, state: int, amount: int
    ) -> tuple[BulkOutcome, str, Refund | None]:
        """One charge of a bulk refund: its outcome, the line that names it, and the refund
        this confirmation made of it (None when it made none now)."""
        try:
            result = self._create_refund(
                request,
                charge,
                form,
                amount=amount,
                key=f"{form.cleaned_data['batch_key']}:{charge.pk}",
                state=state,
                refuse_repeats=not form.cleaned_data.get("refund_again"),
            )
        except RepeatOfEarlier as exc:
            earlier = exc.earlier
            return BulkOutcome.REPEAT, f"{charge.pk} (like {earlier.pk}, {by_words(earlier)})", None
        except ChargeChanged:
            return BulkOutcome.CHANGED, charge.pk, None
        except LedgerError as exc:
            return BulkOutcome.REFUSED, f"{charge.pk} ({exc.code})", None
        except (OperationalError, InterfaceError):
            log.exception("database unavailable during a bulk refund of %s", charge.pk)
            drop_broken_connection()
            return BulkOutcome.INTERRUPTED, f"{charge.pk} (database_unavailable)", None
        refund = result.item
        amount_text = format_money(refund.amount, refund.currency)
        line = f"{charge.pk} {amount_text} ({refund.id})"
        if result.replayed:
            return BulkOutcome.REPLAYED, line, None
        if refund.status == Refund.Status.AWAITING_APPROVAL:
            self.log_change(
                request,
                charge,
                f"Asked for a refund of {amount_text} as {refund.id} in a bulk refund, "
                "awaiting approval (over the limit).",
            )
        else:
            self.log_change(
                request, charge, f"Refunded {amount_text} as {refund.id} in a bulk refund."
            )
        return BulkOutcome(refund.status), line, refund


class BulkOutcome(models.TextChoices):
    """What became of one selected charge in a bulk refund: a new refund's status, or one
    of the reasons none was made. The label is what the person is told."""

    SUCCEEDED = Refund.Status.SUCCEEDED, "Refunded"
    PENDING = (
        Refund.Status.PENDING,
        "Sent, waiting for the provider: amounts reserved, not yet refunded",
    )
    AWAITING_APPROVAL = (
        Refund.Status.AWAITING_APPROVAL,
        "Waiting for approval (over your limit): amounts reserved",
    )
    UNKNOWN = (
        Refund.Status.UNKNOWN,
        "Sent, provider outcome unknown (the reconciler will ask): amounts reserved, "
        "not counted as refunded",
    )
    FAILED = Refund.Status.FAILED, "Declined by the provider"
    # A new refund is never canceled (only a decision or expiry cancels one, later); here so
    # that whatever status a refund comes back with is told.
    CANCELED = Refund.Status.CANCELED, "Canceled (nothing sent, amount released)"
    REPLAYED = "replayed", "Already refunded by this confirmation (replayed)"
    CHANGED = (
        "changed",
        "Not refunded, because the charge changed after the confirmation page was shown "
        "(charge_changed); select it again to see what is left",
    )
    SKIPPED = "skipped", "Not refunded, nothing to refund"
    REPEAT = (
        "repeat",
        "Not refunded, skipped as a repeat of an earlier refund of the same amount "
        "(repeat_of_earlier); tick “Refund them again anyway” to refund them",
    )
    REFUSED = "refused", "Refused"
    INTERRUPTED = (
        "interrupted",
        "The database did not answer; these may or may not be refunded. Go Back and confirm "
        "the same page again: it replays what was made and never refunds twice",
    )


# How the bulk refund tells the person about each outcome, in this order.
BULK_OUTCOMES = [
    (BulkOutcome.SUCCEEDED, messages.SUCCESS),
    (BulkOutcome.PENDING, messages.INFO),
    (BulkOutcome.AWAITING_APPROVAL, messages.WARNING),
    (BulkOutcome.UNKNOWN, messages.WARNING),
    (BulkOutcome.FAILED, messages.ERROR),
    (BulkOutcome.CANCELED, messages.WARNING),
    (BulkOutcome.REPLAYED, messages.WARNING),
    (BulkOutcome.CHANGED, messages.ERROR),
    (BulkOutcome.SKIPPED, messages.WARNING),
    (BulkOutcome.REPEAT, messages.WARNING),
    (BulkOutcome.REFUSED, messages.ERROR),
    (BulkOutcome.INTERRUPTED, messages.ERROR),
]


# The money a bulk refund moved, each kind with its own total, in this order: reserved
# money awaiting approval or an answer is never added to what was refunded.
MONEY_KINDS = [
    (BulkOutcome.SUCCEEDED, "refunded"),
    (BulkOutcome.PENDING, "sent, waiting for the provider (reserved)"),
    (BulkOutcome.AWAITING_APPROVAL, "awaiting approval (reserved, not refunded)"),
    (BulkOutcome.UNKNOWN, "outcome unknown (reserved)"),
    (BulkOutcome.FAILED, "declined (not refunded)"),
    (BulkOutcome.CANCELED, "canceled (released)"),
]


def money_words(money: dict) -> str:
    """ "Totals: refunded $5.00; awaiting approval (reserved, not refunded) $700.00": each
    kind of outcome's money apart, per currency."""
    parts = []
    for outcome, words in MONEY_KINDS:
        if money.get(outcome):
            totals = ", ".join(total for _c, total in totals_by_currency(money[outcome]))
            parts.append(f"{words} {totals}")
    return "Totals: " + "; ".join(parts) + "."


def repeat_window() -> timedelta:
    """How far back the admin looks for a refund that a new one of the same amount repeats."""
    return timedelta(days=settings.REFUND_REPEAT_WINDOW_DAYS)


def by_words(refund: Refund) -> str:
    """Who made a refund: its bulk run if one did, else the person or system."""
    if refund.batch_id:
        return f"by batch {refund.batch_id}"
    return f"by {refund.actor or refund.source}"


def repeat_words(earlier: Refund) -> str:
    """The refund form's warning about the recent refund this one would repeat."""
    amount = format_money(earlier.amount, earlier.currency)
    return (
        f"This charge was already refunded {amount} on {shown_time(earlier.created_at)} "
        f"{by_words(earlier)}, as {earlier.pk} "
        f"({earlier.get_status_display().lower()}). Nothing was refunded now "
        "(repeat_of_earlier). Tick “Refund again anyway” to refund the same amount again."
    )


def awaiting_approval_words(refund: Refund, amount: str) -> str:
    expires = f" by {shown_time(refund.approval_expires_at)}" if refund.approval_expires_at else ""
    return (
        f"Refund {refund.id} of {amount} is over your limit and is awaiting approval: the "
        "amount is reserved on the charge and nothing is sent until a support lead approves "
        f"it. If it is rejected, or not approved{expires}, the amount is released."
    )


@dataclass(frozen=True)
class LimitsShown:
    """A requester's limits in one currency and what they refunded today, formatted."""

    currency: str
    per_refund: str | None
    per_day: str | None
    spent_today: str


def limits_shown(user, currency: str) -> LimitsShown | None:
    """What the refund form tells its requester before they submit; None without limits."""
    mine = limits_for(user=user, actor_label=actor_label(user), currency=currency)
    if not mine.any:
        return None
    spent = spent_today(actor_label=actor_label(user), currency=currency, now=timezone.now())
    return LimitsShown(
        currency=currency.upper(),
        per_refund=None if mine.per_refund is None else format_money(mine.per_refund, currency),
        per_day=None if mine.per_day is None else format_money(mine.per_day, currency),
        spent_today=format_money(spent, currency),
    )


def reason_words(refund: Refund) -> str:
    """A refund's reason as the admin history tells it; a refund may have none."""
    return refund.get_reason_display() if refund.reason else "no reason"


def is_refundable(charge: Charge) -> bool:
    return charge.status == Charge.Status.SUCCEEDED and charge.amount_refundable > 0


def why_not_refundable(charge: Charge) -> str:
    if charge.status != Charge.Status.SUCCEEDED:
        return f"charge is {charge.status}"
    return "fully refunded"


def refund_url(charge: Charge) -> str:
    """The refund page of a charge; without `?form=`, it redirects to a new form."""
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


def refund_made_with(key: str) -> Refund | None:
    """The refund an already used form key made, if it made one."""
    record = idempotency_record(key)
    return record.refund if record is not None and record.refund_id else None


def confirmation_form(refundable: list[Charge], *, recent: int = 0) -> BulkRefundForm:
    """The bulk refund form as drawn now: what it shows is what confirming it refunds;
    `recent` of its charges were refunded within the repeat window."""
    states = charge_states([c.pk for c in refundable])
    return BulkRefundForm(
        recent=recent,
        initial={
            "batch_key": new_form_key(ADMIN_BULK_KEYS),
            "confirmed": BulkRefundForm.sign(
                {c.pk: (states[c.pk], c.amount_refundable) for c in refundable}
            ),
        },
    )


def history_table(template: str, rows: list[tuple], changelist: str, charge: Charge) -> str:
    """The newest of a charge's refunds or ledger entries (each row: the object and its
    amount, formatted) and a link to all of them; "None" when it has none."""
    if not rows:
        return "None"
    all_url = reverse(changelist) + "?" + urlencode({"charge__id__exact": charge.pk})
    return render_to_string(template, {"rows": rows, "all_url": all_url})


def refunds_table(charge: Charge) -> str:
    refunds = charge.refunds.order_by("-created_at", "-id")[:SHOWN_ON_PAGE]
    return history_table(
        "admin/ledger_app/charge/refund_history.html",
        [(r, format_money(r.amount, r.currency)) for r in refunds],
        "admin:ledger_app_refund_changelist",
        charge,
    )
