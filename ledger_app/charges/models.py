"""Charges, and what charges and refunds share: a movement of money the provider
answers for (its status, lease, provider id and provider idempotency key)."""

from __future__ import annotations

import re
from typing import cast

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ledger_app.ids import new_id


def new_charge_id() -> str:
    return new_id("ch_")


def new_payment_intent_id() -> str:
    return new_id("pi_")


# A PaymentIntent id as Stripe writes one (ours are pi_ and 24 letters and digits).
PAYMENT_INTENT_ID = re.compile(r"pi_[A-Za-z0-9_]{1,252}")


class MovementStatus(models.TextChoices):
    """Where a charge or refund stands with the provider."""

    PENDING = "pending", "Pending"  # written here, not yet answered
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # the provider said no
    UNKNOWN = "unknown", "Unknown"  # asked, no answer: the provider may have acted
    # Refunds only. Over its requester's limit: reserved, never sent until another person
    # approves it (then pending).
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    # Refunds only: rejected, or not decided in time; the amount is released, nothing sent.
    CANCELED = "canceled", "Canceled"


class ProviderMovement(models.Model):
    """What a charge and a refund share: money moved through the provider once, under a
    stable provider key, by the guarded send (services/dispatch), and settled forward only.
    """

    Status = MovementStatus
    # Not final: the guarded send may still take these to the provider.
    OPEN_STATUSES = (Status.PENDING, Status.UNKNOWN)
    FINAL_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELED)
    provider_id_field: str  # the field that holds the provider's own id for it

    amount = models.BigIntegerField(help_text="Minor units (cents; yen are already minor units).")
    currency = models.CharField(
        max_length=3, help_text="Lower-case ISO 4217 code (a refund's is always its charge's)."
    )
    status = models.CharField(max_length=20, choices=Status, default=Status.PENDING)
    metadata = models.JSONField(default=dict, blank=True)
    status_detail = models.TextField(blank=True, help_text="Why it failed or is unknown.")
    dispatch_attempts = models.PositiveIntegerField(
        default=0,
        help_text="Times the one guarded send took it to the provider (recorded before each "
        "call: more than zero means the provider may have it).",
    )
    leased_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A sender holds it until then; afterwards anyone may retry it.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="%(class)s_amount_positive"),
            models.CheckConstraint(
                condition=Q(status__in=MovementStatus.values), name="%(class)s_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return str(self.pk)

    @classmethod
    def sent_here(cls) -> Q:
        """The rows the guarded send may take to the provider: those made here. What the
        provider made itself (or an import recorded) is never sent, only told of."""
        raise NotImplementedError

    @property
    def provider_id(self) -> str:
        return cast(str, getattr(self, self.provider_id_field))


class Charge(ProviderMovement):
    provider_id_field = "provider_charge_id"

    id = models.CharField(primary_key=True, max_length=64, default=new_charge_id, editable=False)
    amount_refunded = models.BigIntegerField(
        default=0, help_text="Sum of refunds that are not failed, in minor units."
    )
    description = models.TextField(blank=True)
    customer = models.CharField(max_length=255, blank=True, help_text="Customer reference.")
    provider_idempotency_key = models.CharField(
        max_length=255,
        null=True,
        blank=True,
        unique=True,
        editable=False,
        help_text="Sent on every capture attempt for a charge created here; never changes.",
    )
    provider_charge_id = models.CharField(
        max_length=255, blank=True, help_text="The provider's id, once it has answered."
    )
    dispute_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The provider's dispute of this charge (a charge has at most one), if any.",
    )
    dispute_status = models.CharField(
        max_length=32,
        blank=True,
        default="",
        db_default="",
        help_text="Its dispute's status as the provider last said it; while it is open "
        "(needs_response, under_review, warning_needs_response, warning_under_review) the "
        "charge cannot be refunded.",
    )
    dispute_refundable = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Whether the provider says the charge may still be refunded while its "
        "dispute is open (its is_charge_refundable: true in the inquiry stage).",
    )
    payment_intent = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",  # raw loaders (the benchmark's) that do not name it get none
        help_text="The PaymentIntent (pi_...) this charge belongs to; blank for a charge "
        "made without one. Several charges (a decline, then a success) may share one.",
    )
    receipt_email = models.CharField(
        max_length=254,
        blank=True,
        default="",
        db_default="",
        help_text="Where the customer's refund mails go, unless a refund names another "
        "(docs/customer-mails.md).",
    )
    card_last4 = models.CharField(
        max_length=4,
        blank=True,
        default="",
        db_default="",
        help_text="The last four digits of the card paid with, when the provider or the "
        "import said them: the one card detail a customer's refund status page shows.",
    )
    provider_disagreement = models.JSONField(
        null=True,
        blank=True,
        default=None,
        help_text="Set when the provider reports refunds the ledger has no room for (a "
        "refund made at the provider while ours were in flight, say): why, and the "
        "provider's refunds held back. Refunds of the charge are refused until a lead "
        "applies them (docs/lifecycle.md, 'When the provider disagrees').",
    )

    class Meta(ProviderMovement.Meta):
        indexes = [
            # refunds and lists name a charge by its PaymentIntent
            models.Index(fields=["payment_intent"], name="charge_payment_intent"),
            models.Index(fields=["status", "updated_at"], name="charge_status_updated"),
            # admin filters, each with the list's ordering
            models.Index(fields=["status", "-created_at"], name="charge_status_created"),
            models.Index(fields=["currency", "-created_at"], name="charge_currency_created"),
            models.Index(fields=["customer"], name="charge_customer"),
            # the provider's id: its webhooks and lookups name a charge by it
            models.Index(fields=["provider_charge_id"], name="charge_provider_id"),
            # the few that disagree with the provider: the admin's count, verify_ledger
            models.Index(
                fields=["id"],
                name="charge_disagreeing",
                condition=Q(provider_disagreement__has_key="held"),
            ),
        ]
        constraints = [
            *ProviderMovement.Meta.constraints,
            models.CheckConstraint(
                condition=Q(amount_refunded__gte=0) & Q(amount_refunded__lte=F("amount")),
                name="charge_refunded_within_amount",
            ),
        ]
        permissions = [
            ("refund_charge", "Can issue refunds on charges"),
            ("export_charge", "Can export charges as CSV"),
        ]

    @classmethod
    def sent_here(cls) -> Q:
        # Only a charge created here has a provider key; recorded ones have none.
        return Q(provider_idempotency_key__isnull=False)

    @property
    def refunded(self) -> bool:
        return self.amount_refunded == self.amount

    @property
    def amount_refundable(self) -> int:
        return self.amount - self.amount_refunded

    @property
    def refund_blocker(self) -> str | None:
        """What stops any refund of this charge now, as the code the refusal carries:
        `charge_not_refundable` unless it succeeded, `charge_disputed` while a dispute of it
        is open and the provider does not allow a refund (refunding it would give the money
        back twice: the dispute takes it too),
        `charge_already_refunded` when nothing is left; None when a refund may be made.
        The one statement of the rule: the service refuses by it under the charge's lock,
        and the admin offers refunds by it."""
        if self.status != self.Status.SUCCEEDED:
            return "charge_not_refundable"
        if self.provider_disagreement:  # a hold, {"why": ..., "held": [...]}; None or null: none
            return "charge_disagrees_with_provider"
        if self.dispute_blocks_refunds:
            return "charge_disputed"
        if self.amount_refundable <= 0:
            return "charge_already_refunded"
        return None

    @property
    def dispute_open(self) -> bool:
        return self.dispute_status in OPEN_DISPUTE_STATUSES

    @property
    def dispute_blocks_refunds(self) -> bool:
        """Open, and the provider does not allow a refund while it is (it does in an
        inquiry, a dispute's `warning_*` stage, by its is_charge_refundable); or lost: the
        charge was charged back, and a refund would pay the money a second time (Stripe
        refuses it too)."""
        if self.dispute_status == "lost":
            return True
        return self.dispute_open and not self.dispute_refundable

    @property
    def is_refundable(self) -> bool:
        return self.refund_blocker is None

    @property
    def provider_reference(self) -> str:
        """How the provider knows this charge: its own id, or ours for imported charges."""
        return self.provider_charge_id or self.id


# Stripe's dispute statuses: open ones wait for evidence or a decision; the others ended.
OPEN_DISPUTE_STATUSES = frozenset(
    {"warning_needs_response", "warning_under_review", "needs_response", "under_review"}
)


DISPUTE_STATUSES = OPEN_DISPUTE_STATUSES | {"warning_closed", "won", "lost", "charge_refunded"}
