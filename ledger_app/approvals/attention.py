"""Working the support queue: closing a declined refund once support has dealt with it."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ledger_app import errors
from ledger_app.refunds.models import Refund
from ledger_app.validation import validate_text


def mark_refund_handled(*, refund_id: str, note: str, actor: str) -> Refund:
    """Record that support dealt with a declined refund (the note says how), so it leaves
    the needs-attention queue. Only a `failed` refund can be closed by hand: one whose
    outcome is unknown or pending is money in doubt, settled only by asking the provider.
    Moves no money. Marking one already handled keeps the first record and changes nothing.
    """
    note = validate_text(note, errors.InvalidNote).strip()
    if not note:
        raise errors.NoteRequired("Say in the note what was done about the declined refund.")
    with transaction.atomic(durable=True):
        refund = Refund.objects.select_for_update().filter(pk=refund_id).first()
        if refund is None:
            raise errors.ResourceMissing(f"No such refund: '{refund_id}'.")
        if refund.status != Refund.Status.FAILED:
            raise errors.RefundNotDeclined(
                f"Refund {refund.pk} is {refund.status}. "
                + errors.RefundNotDeclined.default_message
            )
        if refund.handled_at is None:
            refund.handled_at = timezone.now()
            refund.handled_by = actor[:200]
            refund.handled_note = note
            refund.save(update_fields=["handled_at", "handled_by", "handled_note", "updated_at"])
    return refund
