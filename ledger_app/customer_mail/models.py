"""The mail outbox: one row per change a customer is told of, written in the transaction of
the change, sent by `send_customer_mails`; and the addresses staff changed."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ledger_app.refunds.models import Refund


class MailKind(models.TextChoices):
    """The changes a customer is told of, one mail each."""

    MADE = "refund_made", "Refund made"  # pending: on its way (never while awaiting approval)
    SUCCEEDED = "refund_succeeded", "Refund succeeded"
    FAILED = "refund_failed", "Refund failed"  # declined, or failed after it succeeded
    REFERENCE = "refund_reference", "Trace number"  # the ARN, when it came after the success


class MailStatus(models.TextChoices):
    PENDING = "pending", "Waiting to be sent"  # due at next_attempt_at
    SENDING = "sending", "Being sent"  # handed to the SMTP server, its answer not recorded
    SENT = "sent", "Sent"  # the SMTP server accepted it
    # The sender stopped while the SMTP server had it, so it may or may not have gone: it is
    # not sent again by itself (never twice); a person may resend it.
    UNKNOWN = "unknown", "May not have been sent"
    REFUSED = "refused", "Refused"  # the SMTP server said no for good, or retries ran out
    BOUNCED = "bounced", "Bounced"  # accepted, then came back (record_mail_bounce)


class CustomerMail(models.Model):
    """One mail to a customer about one change of their refund. `details` is what the mail
    tells, as it stood when the change was made; the mail is drawn from it in `language`
    when it is sent, and the same again when a person resends it."""

    Kind = MailKind
    Status = MailStatus

    refund = models.ForeignKey(Refund, on_delete=models.PROTECT, related_name="customer_mails")
    kind = models.CharField(max_length=32, choices=MailKind)
    to = models.CharField(max_length=254, help_text="The customer's address.")
    language = models.CharField(max_length=16, help_text="The language it is written in.")
    details = models.JSONField(default=dict, help_text="What it tells, as of the change.")
    status = models.CharField(max_length=16, choices=MailStatus, default=MailStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Times it was handed to SMTP.")
    next_attempt_at = models.DateTimeField(default=timezone.now)
    leased_until = models.DateTimeField(null=True, blank=True)
    sending_since = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    outcome = models.TextField(blank=True, help_text="What the SMTP server or the bounce said.")
    message_id = models.CharField(
        max_length=255, unique=True, help_text="Its Message-ID header, the same on every attempt."
    )
    resend_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="resends"
    )
    requested_by = models.CharField(
        max_length=200, blank=True, help_text="Who resent it (blank: written with its change)."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Once per change: a second mail of a kind is only ever a person's resend.
            models.UniqueConstraint(
                fields=["refund", "kind"],
                condition=Q(resend_of__isnull=True),
                name="customer_mail_once_per_change",
            ),
            models.CheckConstraint(
                condition=Q(status__in=MailStatus.values), name="customer_mail_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=MailKind.values), name="customer_mail_kind_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at", "id"],
                name="customer_mail_due",
                condition=Q(status=MailStatus.PENDING),
            ),
            models.Index(
                fields=["leased_until"],
                name="customer_mail_sending",
                condition=Q(status=MailStatus.SENDING),
            ),
            models.Index(fields=["refund", "-created_at"], name="customer_mail_refund"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} to {self.to}"


class MailAddressChange(models.Model):
    """A person changed where a refund's mails go: from, to, why, who and when."""

    refund = models.ForeignKey(Refund, on_delete=models.PROTECT, related_name="mail_addresses")
    old_address = models.CharField(max_length=254, blank=True)
    new_address = models.CharField(max_length=254)
    note = models.TextField()
    changed_by = models.CharField(max_length=200)
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.old_address or '(none)'} -> {self.new_address}"
