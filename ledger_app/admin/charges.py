"""Charges in the admin: find them fast, read their history, refund them safely."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from decimal import Decimal
from functools import cache

from babel.numbers import get_currency_precision, list_currencies
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote, unquote
from django.core.cache import cache as django_cache
from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.db.models import F, Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from ledger_app.admin.base import ReadOnlyAdmin, money
from ledger_app.admin.forms import FORM_KEY, BulkRefundForm, RefundForm, new_form_key
from ledger_app.db import drop_broken_connection
from ledger_app.errors import ChargeChanged, IdempotencyKeyReused, LedgerError
from ledger_app.models import Charge, Refund
from ledger_app.money import MAJOR_AMOUNT
from ledger_app.selectors import charge_state, charge_states, idempotency_record
from ledger_app.services.idempotency import Created
from ledger_app.services.refunds import create_refund
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
        return [(c, c.upper()) for c in sorted(currencies)]

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
class ChargeAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "status",
        "amount_display",
        "refunded_display",
        "refundable_display",
        "customer",
        "description",
    ]
    list_filter = [
        "status",
        CurrencyFilter,
        RefundStateFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["id"]  # see get_search_results
    search_help_text = "A charge id, a customer reference, an amount (12.34), or description text."
    ordering = ["-created_at", "-id"]
    actions = ["refund_in_full"]
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
    readonly_fields = fields

    @admin.display(description="Amount", ordering="amount")
    def amount_display(self, obj: Charge) -> str:
        return money(obj.amount, obj.currency)

    @admin.display(description="Refunded", ordering="amount_refunded")
    def refunded_display(self, obj: Charge) -> str:
        return money(obj.amount_refunded, obj.currency)

    @admin.display(description="Refundable")
    def refundable_display(self, obj: Charge) -> str:
        """Only a succeeded charge with something left shows an amount here."""
        if not is_refundable(obj):
            return f"— ({why_not_refundable(obj)})"
        return money(obj.amount_refundable, obj.currency)

    @admin.display(description="Refunds")
    def refund_history(self, obj: Charge):
        return refunds_table(obj)

    @admin.display(description="Ledger entries")
    def ledger_history(self, obj: Charge):
        entries = list(obj.ledger_entries.order_by("-id")[:SHOWN_ON_PAGE])
        if not entries:
            return "None"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                    e.kind,
                    e.refund_id or "",
                    money(e.amount, e.currency),
                    e.actor,
                )
                for e in entries
            ),
        )
        url = (
            reverse("admin:ledger_app_ledgerentry_changelist")
            + "?"
            + urlencode({"charge__id__exact": obj.pk})
        )
        return format_html(
            '<div class="history-table"><table><tr><th>When</th><th>Kind</th><th>Refund</th>'
            "<th>Amount</th><th>By</th></tr>{}</table></div>"
            '<a href="{}">All ledger entries of this charge</a>',
            rows,
            url,
        )

    @admin.display(description="Admin history")
    def admin_history(self, obj: Charge):
        entries = (
            LogEntry.objects.filter(
                content_type__app_label="ledger_app",
                content_type__model="charge",
                object_id=obj.pk,
            )
            .select_related("user")
            .order_by("-action_time")[:SHOWN_ON_PAGE]
        )
        rows = format_html_join(
            "",
            "<li>{} {}: {}</li>",
            (
                (
                    e.action_time.strftime("%Y-%m-%d %H:%M"),
                    e.user.get_username(),
                    e.get_change_message(),
                )
                for e in entries
            ),
        )
        return format_html("<ul>{}</ul>", rows) if rows else "None"

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

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "can_refund": self.has_refund_permission(request),
        }
        return super().change_view(request, object_id, form_url, extra_context)

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
        charge = self._charge_or_404(object_id)
        here = reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])
        if request.method == "POST":
            form = RefundForm(request.POST, charge=charge)
            key = request.POST.get("idempotency_key", "")
            if not form.is_valid():
                record = idempotency_record(key) if FORM_KEY.match(key) else None
                if record is not None and record.refund_id:  # e.g. Back, then reload
                    return self._used_form_page(request, charge, record.refund)
                # Drawn again with the errors, against the charge as it is now.
                data = request.POST.copy()
                data["charge_state"] = str(charge_state(charge.pk))
                form = RefundForm(data, charge=charge)
                form.is_valid()
        else:
            key = f"admin:{request.GET.get('form', '')}"
            if not FORM_KEY.match(key):
                return redirect(f"{here}?{urlencode({'form': uuid.uuid4().hex})}")
            record = idempotency_record(key)
            if record is not None and record.refund_id:
                return self._used_form_page(request, charge, record.refund)
            form = self._fresh_form(charge, key)
        notice = ""
        if request.method == "POST" and form.is_valid():
            try:
                result = create_refund(
                    charge_id=charge.pk,
                    amount=form.cleaned_data["amount"],
                    idempotency_key=form.cleaned_data["idempotency_key"],
                    reason=form.service_reason(),
                    note=form.cleaned_data["note"],
                    actor=request.user,
                    source=Refund.Source.ADMIN,
                    unchanged_since=form.cleaned_data["charge_state"],
                )
            except ChargeChanged as exc:
                # Drawn again from the charge as it is now; the amount is asked for anew.
                charge.refresh_from_db()
                notice = f"{exc.message} ({exc.code})"
                form = self._fresh_form(charge, key, form.cleaned_data)
            except IdempotencyKeyReused as exc:
                record = idempotency_record(key)
                if record is not None and record.refund_id:
                    return self._used_form_page(request, charge, record.refund, exc.code)
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
        context = {
            **self._refund_page_context(request, charge),
            "form": form,
            "notice": notice,
            "refundable_now": charge.status == Charge.Status.SUCCEEDED
            and charge.amount_refundable > 0,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, "admin/ledger_app/charge/refund_form.html", context)

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
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Refund {charge.pk}",
            "charge": charge,
            "amount": money(charge.amount, charge.currency),
            "refunded": money(charge.amount_refunded, charge.currency),
            "refundable": money(charge.amount_refundable, charge.currency),
            "refunds": refunds_table(charge),
        }

    def _used_form_page(self, request, charge: Charge, refund: Refund, code: str = ""):
        """What Back, reload or a second tab of an already used form shows: what it did."""
        context = {
            **self._refund_page_context(request, charge),
            "used_refund": refund,
            "used_amount": money(refund.amount, refund.currency),
            "code": code,
            "new_form_url": reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)]),
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
        amount = money(refund.amount, refund.currency)
        if result.replayed:
            self.message_user(
                request,
                f"Already submitted: this form issued refund {refund.id} of {amount} "
                f"({refund.status}) before. Nothing new was refunded.",
                messages.WARNING,
            )
            return "replayed"
        note = f": {refund.note}" if refund.note else ""
        self.log_change(
            request, charge, f"Refunded {amount} as {refund.id} ({refund.reason or 'other'}){note}"
        )
        level = {
            Refund.Status.SUCCEEDED: messages.SUCCESS,
            Refund.Status.FAILED: messages.ERROR,
        }.get(refund.status, messages.WARNING)
        detail = f": {refund.status_detail}" if refund.status_detail else ""
        self.message_user(
            request, f"Refund {refund.id} of {amount}: {refund.status}{detail}.", level
        )
        return "refunded"

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
        if request.POST.get("post") == "yes":
            form = BulkRefundForm(request.POST)
            if form.is_valid():
                self._refund_in_full(request, charges, form)
                return None
        else:  # drawn now: what it shows is what confirming it refunds
            states = charge_states([c.pk for c in refundable])
            form = BulkRefundForm(
                initial={
                    "batch_key": new_form_key("admin-bulk"),
                    "confirmed": BulkRefundForm.sign(
                        {c.pk: (states[c.pk], c.amount_refundable) for c in refundable}
                    ),
                }
            )
        totals: dict[str, int] = defaultdict(int)
        for charge in refundable:
            totals[charge.currency] += charge.amount_refundable
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Refund charges in full",
            "rows": [
                (c, money(c.amount, c.currency), money(c.amount_refundable, c.currency))
                for c in refundable
            ],
            "not_refundable": [
                (c, money(c.amount, c.currency), why_not_refundable(c))
                for c in charges
                if not is_refundable(c)
            ],
            "totals": [(c.upper(), money(t, c)) for c, t in sorted(totals.items())],
            "form": form,
            "queryset": charges,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        return TemplateResponse(
            request, "admin/ledger_app/charge/refund_in_full_confirmation.html", context
        )

    def _refund_in_full(self, request, charges: list[Charge], form: BulkRefundForm) -> None:
        outcomes: dict[str, list[str]] = defaultdict(list)
        shown = form.cleaned_data["confirmed"]
        for charge in charges:
            if charge.pk not in shown:
                outcomes["skipped"].append(f"{charge.pk} ({why_not_refundable(charge)})")
                continue
            state, amount = shown[charge.pk]
            try:
                result = create_refund(
                    charge_id=charge.pk,
                    amount=amount,
                    idempotency_key=f"{form.cleaned_data['batch_key']}:{charge.pk}",
                    reason=form.service_reason(),
                    note=form.cleaned_data["note"],
                    actor=request.user,
                    source=Refund.Source.ADMIN,
                    unchanged_since=state,
                )
            except ChargeChanged:
                outcomes["changed"].append(charge.pk)
                continue
            except LedgerError as exc:
                outcomes["refused"].append(f"{charge.pk} ({exc.code})")
                continue
            except (OperationalError, InterfaceError):
                log.exception("database unavailable during a bulk refund of %s", charge.pk)
                drop_broken_connection()
                outcomes["interrupted"].append(f"{charge.pk} (database_unavailable)")
                continue
            refund = result.item
            amount_text = money(refund.amount, refund.currency)
            if result.replayed:
                outcomes["replayed"].append(f"{charge.pk} {amount_text} ({refund.id})")
                continue
            self.log_change(
                request, charge, f"Refunded {amount_text} as {refund.id} in a bulk refund."
            )
            outcomes[refund.status].append(f"{charge.pk} {amount_text} ({refund.id})")
        for outcome, level, label in BULK_OUTCOMES:
            if outcomes[outcome]:
                self.message_user(request, f"{label}: {', '.join(outcomes[outcome])}", level)


# What the bulk refund tells the person, per outcome, in this order.
BULK_OUTCOMES = [
    ("succeeded", messages.SUCCESS, "Refunded"),
    ("pending", messages.INFO, "Refunded, waiting for the provider"),
    ("unknown", messages.WARNING, "Refunded, provider outcome unknown (the reconciler will ask)"),
    ("failed", messages.ERROR, "Declined by the provider"),
    ("replayed", messages.WARNING, "Already refunded by this confirmation (replayed)"),
    (
        "changed",
        messages.ERROR,
        "Not refunded, because the charge changed after the confirmation page was shown "
        "(charge_changed); select it again to see what is left",
    ),
    ("skipped", messages.WARNING, "Not refunded, nothing to refund"),
    ("refused", messages.ERROR, "Refused"),
    (
        "interrupted",
        messages.ERROR,
        "The database did not answer; these may or may not be refunded. Go Back and confirm "
        "the same page again: it replays what was made and never refunds twice",
    ),
]


def is_refundable(charge: Charge) -> bool:
    return charge.status == Charge.Status.SUCCEEDED and charge.amount_refundable > 0


def why_not_refundable(charge: Charge) -> str:
    if charge.status != Charge.Status.SUCCEEDED:
        return f"charge is {charge.status}"
    return "fully refunded"


def refunds_table(charge: Charge):
    refunds = list(charge.refunds.order_by("-created_at", "-id")[:SHOWN_ON_PAGE])
    if not refunds:
        return "None"
    rows = format_html_join(
        "",
        '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        "<td>{}</td><td>{}</td></tr>",
        (
            (
                reverse("admin:ledger_app_refund_change", args=[quote(r.pk)]),
                r.pk,
                r.created_at.strftime("%Y-%m-%d %H:%M"),
                money(r.amount, r.currency),
                r.status,
                r.get_reason_display() or "other",
                r.actor,
                r.note,
            )
            for r in refunds
        ),
    )
    url = (
        reverse("admin:ledger_app_refund_changelist")
        + "?"
        + urlencode({"charge__id__exact": charge.pk})
    )
    return format_html(
        '<div class="history-table"><table><tr><th>Refund</th><th>When</th><th>Amount</th>'
        "<th>Status</th><th>Reason</th><th>By</th><th>Note</th></tr>{}</table></div>"
        '<a href="{}">All refunds of this charge</a>',
        rows,
        url,
    )
