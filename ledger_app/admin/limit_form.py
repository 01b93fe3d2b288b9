"""The refund limit's form: a limit typed in major units of its currency, for the support
lead who sets it (the Refund limits admin, approvals.py)."""

from __future__ import annotations

from typing import Any

from django import forms

from ledger_app.admin.forms import CodedCharField, cleaned_by
from ledger_app.approvals.models import RefundLimit
from ledger_app.errors import LedgerError
from ledger_app.money import normalize_currency, parse_major, to_major


class RefundLimitForm(forms.ModelForm):
    """A limit typed in major units of its currency (500.00 for $500.00), stored in minor
    units. Exactly one of group, user or API key."""

    SUBJECTS = ("group", "user", "api_key")

    currency = CodedCharField(
        code="invalid_currency",
        max_length=3,
        help_text="ISO 4217 code, e.g. USD.",
        widget=forms.TextInput(attrs={"size": 4, "autocomplete": "off"}),
    )
    per_refund = CodedCharField(
        code="invalid_amount",
        required=False,
        max_length=40,
        label="Per refund",
        help_text="In major units, e.g. 500.00. Blank: no limit on one refund.",
    )
    per_day = CodedCharField(
        code="invalid_amount",
        required=False,
        max_length=40,
        label="Per day",
        help_text="In major units, e.g. 2000.00: the most one requester refunds a day (UTC) "
        "without approval. Blank: no daily limit.",
    )

    class Meta:
        model = RefundLimit
        fields = ["group", "user", "api_key", "currency", "per_refund", "per_day"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("per_refund", "per_day"):
            self.fields[name].widget.attrs.update(autocomplete="off", inputmode="decimal")
        instance = self.instance
        if instance.pk is not None:
            self.initial["currency"] = instance.currency.upper()
            for name in ("per_refund", "per_day"):
                amount = getattr(instance, name)
                self.initial[name] = (
                    "" if amount is None else str(to_major(amount, instance.currency))
                )

    def clean_currency(self) -> str:
        try:
            return normalize_currency(self.cleaned_data["currency"].strip())
        except LedgerError as exc:
            raise forms.ValidationError(f"{exc.message} ({exc.code})", code=exc.code) from exc

    def _amount(self, name: str) -> int | None:
        text = self.cleaned_data[name].strip()
        currency = self.cleaned_data.get("currency")
        if not text or currency is None:  # no currency: its own error says so
            return None
        try:
            return parse_major(text, currency)
        except LedgerError as exc:
            raise forms.ValidationError(f"{exc.message} ({exc.code})", code=exc.code) from exc

    def clean_per_refund(self) -> int | None:
        return self._amount("per_refund")

    def clean_per_day(self) -> int | None:
        return self._amount("per_day")

    def clean(self) -> dict[str, Any]:
        cleaned = cleaned_by(self, super().clean())
        if sum(cleaned.get(name) is not None for name in self.SUBJECTS) != 1:
            # On the first field, so the database's own check is not reported twice.
            self.add_error(
                "group",
                forms.ValidationError(
                    "Choose exactly one of a group, a user or an API key (invalid_subject).",
                    code="invalid_subject",
                ),
            )
        return cleaned
