"""Refunds: the amount, reason and status of money given back on a charge."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger_app.charges.models import Charge, MovementStatus, ProviderMovement
from ledger_app.ids import new_id


def new_refund_id() -> str:
    return new_id("re_")


class RefundReason(models.TextChoices):
    DUPLICATE = "duplicate", "Duplicate"
    FRAUDULENT = "fraudulent", "Fraudulent"
    REQUESTED_BY_CUSTOMER = "requested_by_customer", "Requested by customer"


class Refund(ProviderMovement):
    provider_id_field = "provider_refund_id"

    Reason = RefundReason

    class Source(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "API"
        CLI = "cli", "Command line"
        BULK = "bulk", "Bulk file"
        SYSTEM = "system", "System"
        # Made at the provider before its charge was imported (import_charges); never sent.
        IMPORT = "import", "Charge import"
        # Made at the provider (its dashboard, another system), adopted from what it told
        # us (ledger_app/mirror); never sent.
        PROVIDER = "provider", "At the provider"

    # Statuses whose amount counts in the charge's amount_refunded: money that left, may
    # have left, or waits for approval. A provider's "no" (failed) or a cancellation
    # (rejected, or not approved in time) releases it.
    LIVE_STATUSES = (
        MovementStatus.PENDING,
        MovementStatus.SUCCEEDED,
        MovementStatus.UNKNOWN,
        MovementStatus.AWAITING_APPROVAL,
    )

    @classmethod
    def sent_here(cls) -> Q:
        return ~Q(source__in=[cls.Source.PROVIDER, cls.Source.IMPORT])

    id = models.CharField(primary_key=True, max_length=64, default=new_refund_id, editable=False)
    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="refunds")
    reason = models.CharField(max_length=32, choices=Reason, blank=True)
    note = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=Source)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        # Who issued a refund is audit: the user cannot be deleted while it names them
        # (deactivate them instead; ledger_app/audit_trail.py).
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The staff user who issued it, when a person did.",
    )
    actor = models.CharField(
        max_length=200, blank=True, help_text="Who issued it: user, API key prefix, command."
    )
    provider_idempotency_key = models.CharField(
        max_length=255,
        unique=True,
        editable=False,
        help_text="Sent to the provider on every attempt for this refund; never changes.",
    )
    payment_intent = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="Its charge's PaymentIntent, copied when the refund is made (the API shows "
        "it; lists filter by the charge's).",
    )
    provider_refund_id = models.CharField(
        max_length=255, blank=True, help_text="The provider's id, once it has answered."
    )
    balance_transaction = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The provider's balance transaction of it (txn_...), once close_books "
        "matched one.",
    )
    failure_balance_transaction = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The provider's balance transaction that gave its money back when it "
        "failed after it succeeded, once close_books matched one.",
    )
    destination_reference = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text="The card network's reference for the refund (its acquirer reference "
        "number, ARN), once the provider has it: what the customer's bank traces it by.",
    )
    instructions_email = models.CharField(
        max_length=254,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="The address given with the refund for the customer's mails (Stripe's "
        "instructions_email), if one was.",
    )
    customer_email = models.CharField(
        max_length=254,
        blank=True,
        default="",
        db_default="",
        help_text="Where its customer mails go now: the address given with it, else its "
        "charge's receipt e-mail, unless staff changed it since (blank: none are sent).",
    )
    handled_at = models.DateTimeField(
        null=True, blank=True, help_text="When support marked this declined refund handled."
    )
    handled_by = models.CharField(max_length=200, blank=True, help_text="Who marked it handled.")
    handled_note = models.TextField(blank=True, help_text="What support did about the decline.")
    approval_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Over its requester's limit: canceled, its amount released, if nobody "
        "approves it by then.",
    )
    decided_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was approved, rejected or expired."
    )
    decided_by = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who approved or rejected it (system:expiry if nobody).",
    )
    decision_note = models.TextField(blank=True, help_text="Why it was approved or rejected.")
    batch_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The bulk run that made it (bulk_refund --batch-id), if one did.",
    )

    class Meta(ProviderMovement.Meta):
        permissions = [
            ("approve_refund", "Can approve or reject refunds over a limit"),
            ("export_refund", "Can export refunds as CSV"),
        ]
        indexes = [
            models.Index(fields=["charge", "status"], name="refund_charge_status"),
            models.Index(fields=["status", "leased_until"], name="refund_status_lease"),
            # a charge's newest refunds, in exactly the order they are listed and embedded
            models.Index(fields=["charge", "-created_at", "-id"], name="refund_charge_created"),
            models.Index(fields=["status", "-created_at"], name="refund_status_created"),
            models.Index(fields=["created_by", "-created_at"], name="refund_by_created"),
            models.Index(fields=["provider_refund_id"], name="refund_provider_id"),
            models.Index(
                fields=["approval_expires_at"],
                name="refund_awaiting_approval",
                condition=Q(status=MovementStatus.AWAITING_APPROVAL),
            ),
            models.Index(fields=["actor", "currency", "created_at"], name="refund_actor_day"),
            # made at the provider: the admin's count and its list filtered by source
            models.Index(fields=["source", "-created_at"], name="refund_source_created"),
        ]
        constraints = [
            *ProviderMovement.Meta.constraints,
            models.CheckConstraint(
                condition=Q(reason__in=["", *RefundReason.values]), name="refund_reason_valid"
            ),
            # Only a declined refund is closed by hand; money in doubt is the reconciler's.
            models.CheckConstraint(
                condition=Q(handled_at__isnull=True) | Q(status=MovementStatus.FAILED),
                name="refund_handled_only_if_failed",
            ),
        ]
