"""Writing customer mails: each with the change it tells of, in the change's transaction,
at most once per change (the `customer_mail_once_per_change` constraint, and writes that
skip a conflict rather than fail the change); and what staff do: resend the last one,
change the address future mails go to.

What a mail tells (`details`) is taken from the rows the change has in hand, so writing
one costs no read: on the reserve's and the settle's paths it is one more statement in
their one round trip (`mail_write`, sql_writes). A refund with no address
(`Refund.customer_email` blank) or REFUND_EMAILS off writes none.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, timedelta
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger_app import errors, sql_writes
from ledger_app.charges.models import Charge
from ledger_app.customer_mail.models import CustomerMail, MailAddressChange, MailKind, MailStatus
from ledger_app.refunds.models import Refund
from ledger_app.validation import validate_email_address, validate_text

__all__ = [
    "arrival_window",
    "refund_days",
    "change_address",
    "first_address",
    "language_of",
    "mail_write",
    "new_mail",
    "resend_last",
    "tell",
]


def first_address(instructions_email: str, charge: Charge) -> str:
    """Where a new refund's mails go: the address given with it, else its charge's receipt
    e-mail; never an address nobody gave."""
    return instructions_email or charge.receipt_email


def language_of(charge: Charge) -> str:
    """The charge's customer's language, when its metadata `locale` names one the mails
    are written in (`de`, `de-AT`, `de_CH` all say German); else the first of LANGUAGES."""
    wanted = str(charge.metadata.get("locale", "")).strip().lower()[:2]
    codes = [code for code, _ in settings.LANGUAGES]
    return wanted if wanted in codes else codes[0]


def arrival_window(made: date) -> tuple[date, date]:
    """When the money should be on the customer's statement: REFUND_ARRIVAL_DAYS_FROM to
    REFUND_ARRIVAL_DAYS_TO business days (Monday to Friday) after the refund was made."""
    return (
        _business_days_after(made, settings.REFUND_ARRIVAL_DAYS_FROM),
        _business_days_after(made, settings.REFUND_ARRIVAL_DAYS_TO),
    )


def _business_days_after(day: date, count: int) -> date:
    while count > 0:
        day += timedelta(days=1)
        if day.weekday() < 5:
            count -= 1
    return day


def refund_days(refund: Refund) -> tuple[date, date, date]:
    """The day the refund was made as the customer counts it (a refund that waited for
    approval: the day a lead approved it), and the window its money should arrive in; UTC
    days. What the mails and the status page both say."""
    made = timezone.localdate(refund.decided_at or refund.created_at, UTC)
    return (made, *arrival_window(made))


def _details(refund: Refund, charge: Charge) -> dict[str, Any]:
    made, arrive_from, arrive_to = refund_days(refund)
    return {
        "amount": refund.amount,
        "currency": refund.currency,
        "card_last4": charge.card_last4,
        "reference": refund.destination_reference,
        "made_on": made.isoformat(),
        "arrival_from": arrive_from.isoformat(),
        "arrival_to": arrive_to.isoformat(),
    }


def _message_id() -> str:
    """A new Message-ID on the domain of REFUND_EMAIL_FROM (a display name allowed)."""
    domain = parseaddr(settings.DEFAULT_FROM_EMAIL)[1].rpartition("@")[2]
    if not domain or len(domain) > MAX_DOMAIN or not domain.isascii() or "<" in domain:
        domain = "localhost"
    return f"<{uuid.uuid4().hex}@{domain}>"


MAX_DOMAIN = 200  # a Message-ID fits its 255-character column


def new_mail(refund: Refund, charge: Charge, kind: MailKind) -> CustomerMail | None:
    """The mail telling of this change of `refund` (its charge `charge`), unsaved; None when
    REFUND_EMAILS is off or the refund has no address."""
    if not settings.REFUND_EMAILS or not refund.customer_email:
        return None
    return CustomerMail(
        refund=refund,
        kind=kind,
        to=refund.customer_email,
        language=language_of(charge),
        details=_details(refund, charge),
        message_id=_message_id(),
    )


def mail_write(refund: Refund, charge: Charge, kind: MailKind) -> sql_writes.Statement | None:
    """new_mail as one statement of the caller's sql_writes.execute_together (None: no
    mail); a second mail of the same change is skipped, never an error that would undo it."""
    mail = new_mail(refund, charge, kind)
    return None if mail is None else sql_writes.insert([mail], skip_conflicts=True)


def tell(refund: Refund, charge: Charge, kind: MailKind) -> None:
    """new_mail written through the ORM, in the caller's transaction (the changes that do
    not go through sql_writes: an approval, a refund adopted from the provider)."""
    mail = new_mail(refund, charge, kind)
    if mail is not None:
        CustomerMail.objects.bulk_create([mail], ignore_conflicts=True)


def resend_last(*, refund_id: str, actor: str) -> CustomerMail:
    """A person's resend of the refund's newest mail: a new mail with the same words, to
    the refund's address as it is now. Refused when the refund has no mail yet
    (`mail_not_found`) or no address."""
    with transaction.atomic(durable=True):
        refund = Refund.objects.select_for_update().filter(pk=refund_id).first()
        if refund is None:
            raise errors.ResourceMissing(f"No such refund: '{refund_id}'.")
        last = refund.customer_mails.order_by("-id").first()
        if last is None:
            raise errors.MailNotFound()
        if last.status in (MailStatus.PENDING, MailStatus.SENDING):
            raise errors.MailNotSentYet()
        if not refund.customer_email:
            raise errors.InvalidEmail("The refund has no address to send to.", param="to")
        original = last.resend_of or last
        return CustomerMail.objects.create(
            refund=refund,
            kind=original.kind,
            to=refund.customer_email,
            language=original.language,
            details=original.details,
            message_id=_message_id(),
            resend_of=original,
            requested_by=actor,
        )


def change_address(*, refund_id: str, address: str, note: str, actor: str) -> MailAddressChange:
    """Staff give a refund's mails a new address, with why: every mail written after this
    goes there, and so do its mails still waiting to be sent."""
    address = validate_email_address(address, param="to")
    if not address:
        raise errors.InvalidEmail(param="to")
    note = validate_text(note, errors.InvalidNote).strip()
    if not note:
        raise errors.NoteRequired()
    with transaction.atomic(durable=True):
        refund = Refund.objects.select_for_update().filter(pk=refund_id).first()
        if refund is None:
            raise errors.ResourceMissing(f"No such refund: '{refund_id}'.")
        change = MailAddressChange.objects.create(
            refund=refund,
            old_address=refund.customer_email,
            new_address=address,
            note=note,
            changed_by=actor,
        )
        # Not updated_at: it says when the refund was last settled (the re-check counts from it).
        Refund.objects.filter(pk=refund.pk).update(customer_email=address)
        refund.customer_mails.filter(status=MailStatus.PENDING).update(to=address)
    return change


def record_bounce(*, message_id: str, reason: str) -> CustomerMail | None:
    """A mail came back: it is `bounced`, with why, whatever it was before (a bounce is
    the last word on it). None when no mail has that Message-ID."""
    with transaction.atomic(durable=True):
        mail = CustomerMail.objects.select_for_update().filter(message_id=message_id).first()
        if mail is None:
            return None
        mail.status = MailStatus.BOUNCED
        mail.outcome = f"bounced: {reason}"[:500]
        mail.leased_until = None
        mail.save(update_fields=["status", "outcome", "leased_until"])
    return mail
