"""The refund form of a charge's page: one refund that cannot move money twice, whatever
the browser does (its key lives in the form's URL), with what the person is told."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import urlencode
from typing_extensions import override

from ledger_app.access.time_zones import shown_time
from ledger_app.admin.base import ReadOnlyAdminMixin
from ledger_app.admin.charge_history import refunds_table
from ledger_app.admin.form_keys import issued_key, new_form_key
from ledger_app.admin.forms import ReasonAndNote, RefundForm
from ledger_app.admin.second_factor import second_factor_gate, take_held_form
from ledger_app.approvals.limits import limits_in_currency, spent_today
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_state
from ledger_app.db import connection_lost, drop_broken_connection
from ledger_app.errors import (
    ChargeChanged,
    ChargeDisagreesWithProvider,
    ChargeDisputed,
    ChargeNotRefundable,
    IdempotencyKeyReused,
    LedgerError,
    RepeatOfEarlier,
)
from ledger_app.idempotency.selectors import idempotency_record
from ledger_app.idempotency.services import ADMIN_FORM_KEYS, Created
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import RefundRequest, actor_label, create_refund
from ledger_app.text import has_unstorable_characters

log = logging.getLogger("ledger_app.admin")

# Shown when a refund's transaction lost the database: it may have committed or not.
DATABASE_UNAVAILABLE = (
    "The database did not answer, so this refund may or may not have been made. Submit this "
    "same form again: it carries the same key, so it finishes or replays the refund and never "
    "makes a second one (database_unavailable)."
)


class RefundFormViews(ReadOnlyAdminMixin):
    """The charge admin's refund page (`<charge>/refund/`) and its "Refund…" button."""

    def get_urls(self):
        refund_url = path(
            "<path:object_id>/refund/",
            self.admin_site.admin_view(self.refund_view),
            name="ledger_app_charge_refund",
        )
        return [refund_url, *super().get_urls()]

    @override  # the signature is ModelAdmin's
    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        """The charge page offers "Refund…" to those who may refund, when there is something
        left to refund."""
        context["refund_offered"] = (
            self.has_refund_permission(request) and obj is not None and obj.is_refundable
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
        """The form under the key in its URL; without a key this back office issued (signed,
        form_keys.new_form_key), a redirect to a new one."""
        signed = f"{ADMIN_FORM_KEYS}:{request.GET.get('form', '')}"
        if issued_key(signed) is None:
            minted = new_form_key().removeprefix(f"{ADMIN_FORM_KEYS}:")
            return redirect(f"{refund_url(charge)}?{urlencode({'form': minted})}")
        used = refund_made_with(signed)
        if used is not None:
            return self._used_form_page(request, charge, used)
        held = take_held_form(request)  # typed before the code page: shown, not submitted
        if held is not None and held.get("idempotency_key") == signed:
            return self._refund_form_page(request, charge, RefundForm(held, charge=charge))
        return self._refund_form_page(request, charge, self._fresh_form(charge, signed))

    def _refund_form_submitted(self, request, charge: Charge):
        """A valid form goes to the service. An invalid one of a used key shows what the
        key made (e.g. Back, then reload); otherwise it is drawn again with its errors,
        against the charge as it is now, and goes to the service if that makes it valid."""
        form = RefundForm(request.POST, charge=charge)
        signed = request.POST.get("idempotency_key", "")
        if not form.is_valid():
            used = refund_made_with(signed)  # a key it did not issue: None, and no refund
            if used is not None:
                return self._used_form_page(request, charge, used)
            data = request.POST.copy()
            data["charge_state"] = str(charge_state(charge.pk))
            form = RefundForm(data, charge=charge)
            if not form.is_valid():
                return self._refund_form_page(request, charge, form)
        return self._refund_from_form(request, charge, form, signed)

    def _refund_from_form(self, request, charge: Charge, form: RefundForm, signed: str):
        """The refund a valid form asks for (its key is one this back office issued, as
        `signed`); a refusal is shown on the form."""
        notice = ""
        try:
            result = create_admin_refund(
                request,
                charge,
                form,
                amount=form.cleaned_data["amount"],
                key=form.cleaned_data["idempotency_key"],  # the key `signed` names
                state=form.cleaned_data["charge_state"],
            )
        except RepeatOfEarlier as exc:
            # Nothing was written and the key is still free: the same form, ticked, refunds.
            form = RefundForm(form.data, charge=charge, earlier=exc.earlier)
            form.is_valid()
        except ChargeChanged as exc:
            # Drawn again from the charge as it is now; the amount is asked for anew.
            charge.refresh_from_db()
            notice = f"{exc.message} ({exc.code})"
            form = self._fresh_form(charge, signed, form.cleaned_data)
        except IdempotencyKeyReused as exc:
            used = refund_made_with(signed)
            if used is not None:
                return self._used_form_page(request, charge, used, exc.code)
            form.add_error(None, f"{exc.message} ({exc.code})")
        except LedgerError as exc:
            form.add_error(
                exc.param if exc.param in form.fields else None, f"{exc.message} ({exc.code})"
            )
        except DatabaseError as exc:
            if not connection_lost(exc):
                raise
            log.exception("database unavailable during an admin refund of %s", charge.pk)
            drop_broken_connection()
            form.add_error(None, DATABASE_UNAVAILABLE)
        else:
            self._report(request, charge, result)
            return redirect("admin:ledger_app_charge_change", quote(charge.pk))
        return self._refund_form_page(request, charge, form, notice)

    def _fresh_form(self, charge: Charge, signed: str, kept: dict | None = None) -> RefundForm:
        kept = kept or {}
        return RefundForm(
            charge=charge,
            initial={
                "idempotency_key": signed,
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
            "refundable_now": charge.is_refundable,
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


def create_admin_refund(
    request,
    charge: Charge,
    form: ReasonAndNote,
    *,
    amount: int,
    key: str,
    state: int,
) -> Created[Refund]:
    """A refund through the service, by this person, with the form's reason and note;
    unless the person insisted (form.refunds_again), refused as repeat_of_earlier when it
    repeats a live refund of the same amount made within REFUND_REPEAT_WINDOW_DAYS. The
    refund form and the bulk refund action both refund through it."""
    return create_refund(
        RefundRequest(
            charge_id=charge.pk,
            amount=amount,
            idempotency_key=key,
            reason=form.service_reason(),
            note=form.cleaned_data["note"],
            actor=request.user,
            source=Refund.Source.ADMIN,
            unchanged_since=state,
            refuse_repeats_within=None if form.refunds_again() else repeat_window(),
        )
    )


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
    mine = limits_in_currency(user=user, actor_label=actor_label(user), currency=currency)
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


def why_not_refundable(charge: Charge) -> str:
    """Why a charge offers no refund (Charge.refund_blocker), in the words of the
    "Refundable" column."""
    blocker = charge.refund_blocker
    if blocker == ChargeNotRefundable.code:
        return f"charge is {charge.status}"
    if blocker == ChargeDisputed.code:
        return f"disputed: {charge.dispute_status}"
    if blocker == ChargeDisagreesWithProvider.code:
        return "disagrees with the provider: a lead resolves it"
    return "fully refunded"


def refund_url(charge: Charge) -> str:
    """The refund page of a charge; without `?form=`, it redirects to a new form."""
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


def refund_made_with(signed: str) -> Refund | None:
    """The refund an already used form key (as the form carries it, signed) made, if it
    made one; None for a key this back office did not issue."""
    key = issued_key(signed)
    if key is None:
        return None
    record = idempotency_record(key)
    return record.refund if record is not None and record.refund_id else None
