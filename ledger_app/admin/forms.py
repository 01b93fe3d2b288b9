"""Forms that turn what staff type into exactly what the service expects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from django import forms
from django.core import signing

from ledger_app.admin.form_keys import unsigned_key
from ledger_app.charges.models import Charge
from ledger_app.errors import LedgerError
from ledger_app.idempotency.services import ADMIN_BULK_KEYS, ADMIN_FORM_KEYS
from ledger_app.mixin_bases import FormFieldMixin, FormMixin
from ledger_app.money import format_money, parse_major
from ledger_app.refunds.models import Refund

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # What Form.add_error takes: a message or messages, or (with no field) them by field.
    Messages = forms.ValidationError | StrOrPromise | Sequence[forms.ValidationError | StrOrPromise]
    FormError = Messages | Mapping[str, Messages]

OTHER = "other"
# The model's own labels, so a reason reads the same on the form, the refund's page, the
# lists and the history; "Other" is the form's way of giving none.
REASONS = [
    *(
        (reason.value, reason.label)
        for reason in (
            Refund.Reason.REQUESTED_BY_CUSTOMER,  # the most common first
            Refund.Reason.DUPLICATE,
            Refund.Reason.FRAUDULENT,
        )
    ),
    (OTHER, "Other (explain in the note)"),
]


def note_required(message: str) -> forms.ValidationError:
    return forms.ValidationError(f"{message} (note_required)", code="note_required")


def cleaned_by(form: forms.BaseForm, cleaned: dict[str, Any] | None) -> dict[str, Any]:
    """What a form's clean() gave: Django keeps the form's cleaned_data when it gives None."""
    return form.cleaned_data if cleaned is None else cleaned


class CodedField(FormFieldMixin):
    """A field whose refusals name their stable code, as the service's refusals do: a
    person (or a tampered form) sees `... (invalid_note)`, never an anonymous message."""

    def __init__(self, *args: Any, code: str, **kwargs: Any) -> None:
        self.code = code
        super().__init__(*args, **kwargs)

    def clean(self, value: Any) -> Any:
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


def note_field(
    help_text: str, *, code: str = "invalid_note", required: bool = False
) -> CodedCharField:
    """The free-text note every refund form asks for, as the service stores it."""
    return CodedCharField(
        code=code,
        required=required,
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=help_text,
    )


class NoteNeeded(FormMixin):
    """A form whose note must say something; blank (or only spaces) is `note_required`
    with `note_needed` as the message."""

    note_needed = "Say what this is for."

    def clean(self) -> dict[str, Any]:
        cleaned = cleaned_by(self, super().clean())
        if not cleaned.get("note", "").strip() and "note" not in self.errors:
            self.add_error("note", note_required(self.note_needed))
        return cleaned


class ReasonAndNote(forms.Form):
    reason = CodedChoiceField(choices=[("", "---------"), *REASONS], code="invalid_reason")
    note = note_field(
        "Required when the reason is Other, and when this refund takes the whole charge "
        "amount (nothing refunded before)."
    )

    @overload
    def add_error(self, field: None, error: FormError) -> None: ...
    @overload
    def add_error(self, field: str | None, error: Messages) -> None: ...
    def add_error(self, field: str | None, error: Any) -> None:
        """An error on a hidden field would be invisible next to it: show it on top."""
        if field is not None and field in self.fields and self.fields[field].widget.is_hidden:
            field = None
        super().add_error(field, error)

    def service_reason(self) -> str:
        reason = self.cleaned_data["reason"]
        return "" if reason == OTHER else reason

    def refunds_again(self) -> bool:
        """Whether the person ticked "Refund again anyway" (no repeat check then); a form
        without that box never does."""
        return bool(self.cleaned_data.get("refund_again"))

    def clean(self) -> dict[str, Any]:
        cleaned = cleaned_by(self, super().clean())
        if cleaned.get("reason") == OTHER and not cleaned.get("note", "").strip():
            self.add_error("note", note_required("Explain the refund when the reason is Other."))
        return cleaned


class ExactAmountBox(forms.CheckboxInput):
    """A box whose value is an amount of minor units, drawn from the charge as it is now
    and never drawn ticked: a page redrawn after an error or Back asks again."""

    def __init__(self, amount: int) -> None:
        super().__init__(attrs={"value": amount, "autocomplete": "off"})

    def format_value(self, value: Any) -> str | None:
        return None

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        return super().get_context(name, None, attrs)

    def value_from_datadict(
        self, data: Mapping[str, Any], files: Mapping[str, Any], name: str
    ) -> Any:
        return data.get(name) or None


class RefundForm(ReasonAndNote):
    """One refund by a person. Nothing here means "everything": the amount is typed, or
    the box that names the exact amount left is ticked. The hidden `charge_state` is the
    charge as it was shown; the service refuses the refund if the charge has changed."""

    amount = CodedCharField(
        code="invalid_amount",
        required=False,
        max_length=40,
        help_text="In major units, e.g. 12.34.",
    )
    refund_all = forms.IntegerField(required=False, min_value=1, label="Refund everything left")
    idempotency_key = CodedCharField(
        code="invalid_idempotency_key", widget=forms.HiddenInput, max_length=255
    )
    charge_state = forms.IntegerField(
        min_value=0,
        widget=forms.HiddenInput,
        error_messages={
            "required": "This form is out of date: open the refund page again (charge_changed).",
            "invalid": "This form is out of date: open the refund page again (charge_changed).",
        },
    )

    refund_again = forms.BooleanField(required=False, label="Refund again anyway")

    field_order = [
        "amount",
        "refund_all",
        "reason",
        "note",
        "refund_again",
        "idempotency_key",
        "charge_state",
    ]

    def clean_idempotency_key(self) -> str:
        return unsigned_key(self.cleaned_data["idempotency_key"], ADMIN_FORM_KEYS)

    def __init__(
        self, *args: Any, charge: Charge, earlier: Refund | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.charge = charge
        # `earlier`: a recent live refund of the same amount this form repeats (the service
        # refused it as repeat_of_earlier). Only then is "Refund again anyway" offered, tied
        # to the warning that names it; a tick already sent is kept so it can be read.
        self.earlier = earlier
        if earlier is not None:
            self.fields["refund_again"].widget.attrs["aria-describedby"] = "repeat-warning"
        elif not (self.is_bound and self.data.get("refund_again")):
            del self.fields["refund_again"]
        left = format_money(charge.amount_refundable, charge.currency)
        self.fields["amount"].widget.attrs.update(autocomplete="off", inputmode="decimal")
        # The box's value is what was left when the page was drawn: ticking it asks for
        # exactly that amount, never for "whatever is left by the time this arrives".
        self.fields["refund_all"].widget = ExactAmountBox(charge.amount_refundable)
        self.fields["refund_all"].label = f"Refund everything left ({left})"

    def clean_amount(self) -> int | None:
        text = self.cleaned_data["amount"].strip()
        if not text:
            return None
        try:
            return parse_major(text, self.charge.currency)
        except LedgerError as exc:
            raise forms.ValidationError(f"{exc.message} ({exc.code})", code=exc.code) from exc

    def clean(self) -> dict[str, Any]:
        cleaned = cleaned_by(self, super().clean())
        typed, everything = cleaned.get("amount"), cleaned.get("refund_all")
        if "amount" in cleaned and "refund_all" in cleaned:
            if typed is None and everything is None:
                self.add_error(
                    "amount",
                    forms.ValidationError(
                        "Type an amount, or tick “Refund everything left” (amount_required).",
                        code="amount_required",
                    ),
                )
            elif typed is not None and everything is not None:
                self.add_error(
                    "amount",
                    forms.ValidationError(
                        "Type an amount or tick “Refund everything left”, not both "
                        "(invalid_amount).",
                        code="invalid_amount",
                    ),
                )
            else:
                cleaned["amount"] = typed if typed is not None else everything
        if needs_note(self.charge, cleaned.get("amount")) and not cleaned.get("note", "").strip():
            self.add_error("note", note_required("A full refund of the charge needs a note."))
        return cleaned


def needs_note(charge: Charge, amount: int | None) -> bool:
    """The note rule the help text states: a refund that takes the whole charge amount,
    i.e. of a charge nothing was refunded from, for all of it. "Refund everything left" on
    a partly refunded charge is not one."""
    return charge.amount_refunded == 0 and amount == charge.amount


class BulkRefundForm(NoteNeeded, ReasonAndNote):
    """Refunds every selected charge in full, so, like a full refund, it needs a note.

    `confirmed` is the signed list of what the confirmation page showed: for each charge
    it can refund, its state and the exact amount left. Only that is refunded, and a
    charge that changed since the page was drawn is refused, not refunded anew."""

    SALT = "ledger_app.admin.bulk-refund"
    note_needed = "Say why these charges are refunded in full."

    batch_key = forms.CharField(widget=forms.HiddenInput, max_length=200)
    confirmed = forms.CharField(widget=forms.HiddenInput, max_length=100_000)
    refund_again = forms.BooleanField(
        required=False,
        label="Refund them again anyway",
        widget=forms.CheckboxInput(
            attrs={"aria-describedby": "recently-refunded id_refund_again_helptext"}
        ),
        help_text="Without it, a charge whose refund now is the same amount as a recent "
        "refund of it is skipped.",
    )

    def __init__(self, *args: Any, recent: int = 0, **kwargs: Any) -> None:
        """`recent`: how many of the charges had live refunds within the repeat window;
        only then is "Refund them again anyway" offered."""
        super().__init__(*args, **kwargs)
        if not recent:
            del self.fields["refund_again"]

    def clean_batch_key(self) -> str:
        return unsigned_key(self.cleaned_data["batch_key"], ADMIN_BULK_KEYS)

    @classmethod
    def sign(cls, shown: dict[str, tuple[int, int]]) -> str:
        return signing.dumps(shown, salt=cls.SALT, compress=True)

    def clean_confirmed(self) -> dict[str, tuple[int, int]]:
        try:
            shown = signing.loads(self.cleaned_data["confirmed"], salt=self.SALT)
        except signing.BadSignature:
            raise forms.ValidationError(
                "This confirmation page is out of date: select the charges again (charge_changed).",
                code="charge_changed",
            ) from None
        return {pk: (int(state), int(amount)) for pk, (state, amount) in shown.items()}


class HandledForm(forms.Form):
    """What support did about a declined refund, before it leaves the queue."""

    note = note_field(
        "What was done about the decline (customer told, refunded another way, …).",
        code="note_required",
        required=True,
    )


class ApproveForm(forms.Form):
    """Approving refunds over a limit: a note is welcome, not required."""

    note = note_field("Optional: why they are approved. Kept on each refund.")


class RejectForm(NoteNeeded, forms.Form):
    """Rejecting refunds over a limit: the requester is owed a reason."""

    note = note_field("Why they are rejected. Kept on each refund, for the person who asked.")
    note_needed = "Say why these refunds are rejected."


class ExplainForm(NoteNeeded, forms.Form):
    """A lead's explanation of differences with the provider: why each is as it should be."""

    note = note_field(
        "Why the ledger and the provider may differ here (what you checked, where it is "
        "settled). Kept on each difference, with your name."
    )
    note_needed = "Say why the differences are as they should be."
