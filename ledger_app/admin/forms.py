"""Forms that turn what staff type into exactly what the service expects."""

from __future__ import annotations

import uuid

from django import forms

from ledger_app.errors import LedgerError
from ledger_app.models import Charge, Refund
from ledger_app.money import format_money, parse_major

OTHER = "other"
REASONS = [
    (Refund.Reason.REQUESTED_BY_CUSTOMER, "Requested by customer"),
    (Refund.Reason.DUPLICATE, "Duplicate charge"),
    (Refund.Reason.FRAUDULENT, "Fraudulent"),
    (OTHER, "Other (explain in the note)"),
]


def note_required(message: str) -> forms.ValidationError:
    return forms.ValidationError(f"{message} (note_required)", code="note_required")


class CodedField:
    """A field whose refusals name their stable code, as the service's refusals do: a
    person (or a tampered form) sees `... (invalid_note)`, never an anonymous message."""

    def __init__(self, *args, code: str, **kwargs):
        self.code = code
        super().__init__(*args, **kwargs)

    def clean(self, value):
        try:
            return super().clean(value)
        except forms.ValidationError as exc:
            raise forms.ValidationError(
                [forms.ValidationError(f"{m} ({self.code})", code=self.code) for m in exc.messages]
            ) from exc


class CodedCharField(CodedField, forms.CharField):
    pass


class CodedChoiceField(CodedField, forms.ChoiceField):
    pass


def new_form_key(prefix: str = "admin") -> str:
    """Minted when a form is rendered: every submission of that rendering shares it."""
    return f"{prefix}:{uuid.uuid4().hex}"


class ReasonAndNote(forms.Form):
    reason = CodedChoiceField(choices=[("", "---------"), *REASONS], code="invalid_reason")
    note = CodedCharField(
        code="invalid_note",
        required=False,
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Required when the reason is Other, and for a full refund of a charge.",
    )

    def service_reason(self) -> str:
        reason = self.cleaned_data["reason"]
        return "" if reason == OTHER else reason

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("reason") == OTHER and not cleaned.get("note", "").strip():
            self.add_error("note", note_required("Explain the refund when the reason is Other."))
        return cleaned


class RefundForm(ReasonAndNote):
    amount = CodedCharField(
        code="invalid_amount",
        required=False,
        max_length=40,
        help_text="In major units, e.g. 12.34. Leave blank to refund everything that is left.",
    )
    idempotency_key = CodedCharField(
        code="invalid_idempotency_key", widget=forms.HiddenInput, max_length=255
    )

    field_order = ["amount", "reason", "note", "idempotency_key"]

    def __init__(self, *args, charge: Charge, **kwargs):
        super().__init__(*args, **kwargs)
        self.charge = charge
        self.fields["amount"].widget.attrs.update(
            placeholder=f"{format_money(charge.amount_refundable, charge.currency)} (the rest)",
            autocomplete="off",
            inputmode="decimal",
        )

    def add_error(self, field, error):
        """An error on the hidden key would be invisible next to its field: show it on top."""
        if field is not None and field in self.fields and self.fields[field].widget.is_hidden:
            field = None
        super().add_error(field, error)

    def clean_amount(self) -> int | None:
        text = self.cleaned_data["amount"].strip()
        if not text:
            return None
        try:
            return parse_major(text, self.charge.currency)
        except LedgerError as exc:
            raise forms.ValidationError(f"{exc.message} ({exc.code})", code=exc.code) from exc

    def clean(self):
        cleaned = super().clean()
        amount = cleaned.get("amount")
        whole_charge = self.charge.amount_refunded == 0 and amount in (None, self.charge.amount)
        if "amount" in cleaned and whole_charge and not cleaned.get("note", "").strip():
            self.add_error("note", note_required("A full refund of the charge needs a note."))
        return cleaned


class BulkRefundForm(ReasonAndNote):
    """Refunds every selected charge in full, so, like a full refund, it needs a note."""

    batch_key = forms.CharField(widget=forms.HiddenInput, max_length=200)

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("note", "").strip() and "note" not in self.errors:
            self.add_error("note", note_required("Say why these charges are refunded in full."))
        return cleaned
