"""The charge list's bulk action, "Refund selected charges in full…": a confirmation page
that shows what confirming refunds, then one refund per charge, each told apart."""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings
from django.contrib import admin, messages
from django.db import DatabaseError, models
from django.utils import timezone

from ledger_app.admin.base import ReadOnlyAdminMixin, report_grouped, totals_by_currency
from ledger_app.admin.form_keys import new_form_key
from ledger_app.admin.forms import BulkRefundForm
from ledger_app.admin.refund_form import (
    by_words,
    create_admin_refund,
    repeat_window,
    why_not_refundable,
)
from ledger_app.charges.models import Charge
from ledger_app.charges.selectors import charge_states
from ledger_app.db import connection_lost, drop_broken_connection
from ledger_app.errors import ChargeChanged, LedgerError, RepeatOfEarlier
from ledger_app.idempotency.services import ADMIN_BULK_KEYS
from ledger_app.money import format_money
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import charges_refunded_since

log = logging.getLogger("ledger_app.admin")

MAX_BULK = 500  # charges one bulk action may refund


class BulkRefundAction(ReadOnlyAdminMixin):
    """The action `refund_in_full` of the charge admin."""

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
        refundable = [c for c in charges if c.is_refundable]
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
                if not c.is_refundable
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
            result = create_admin_refund(
                request,
                charge,
                form,
                amount=amount,
                key=f"{form.cleaned_data['batch_key']}:{charge.pk}",
                state=state,
            )
        except RepeatOfEarlier as exc:
            earlier = exc.earlier
            return BulkOutcome.REPEAT, f"{charge.pk} (like {earlier.pk}, {by_words(earlier)})", None
        except ChargeChanged:
            return BulkOutcome.CHANGED, charge.pk, None
        except LedgerError as exc:
            return BulkOutcome.REFUSED, f"{charge.pk} ({exc.code})", None
        except DatabaseError as exc:
            if not connection_lost(exc):
                raise
            log.exception("database unavailable during a bulk refund of %s", charge.pk)
            drop_broken_connection()
            return BulkOutcome.INTERRUPTED, f"{charge.pk} (database_unavailable)", None
        refund = result.item
        amount_text = format_money(refund.amount, refund.currency)
        line = f"{charge.pk} {amount_text} ({refund.id})"
        if result.replayed:
            return BulkOutcome.REPLAYED, line, None
        self._log_bulk_refund(request, charge, refund, amount_text)
        return BulkOutcome(refund.status), line, refund

    def _log_bulk_refund(self, request, charge: Charge, refund: Refund, amount_text: str) -> None:
        """The charge's change log: the refund made, or asked for when it awaits approval."""
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
