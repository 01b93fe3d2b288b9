"""Ledger data and the database constraints that keep it true even when code is wrong."""

from __future__ import annotations

import re
import secrets
import string
from typing import Any, NoReturn, cast

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ledger_app import api_versions
from ledger_app.encryption import EncryptedSecretField

ID_ALPHABET = string.ascii_letters + string.digits
ID_RANDOM_LENGTH = 24  # about 143 bits: ids are not guessable and not sequential


# Random bytes below this map evenly onto the alphabet (248 = 4 x 62); the rest are dropped.
_EVEN_BYTES = 256 - 256 % len(ID_ALPHABET)


def new_id(prefix: str) -> str:
    """`prefix` and ID_RANDOM_LENGTH characters drawn uniformly from ID_ALPHABET, from one
    read of the system's randomness (every refund makes three or more ids; a read per
    character was a tenth of a refund's Python)."""
    drawn = ""
    while len(drawn) < ID_RANDOM_LENGTH:
        randomness = secrets.token_bytes(ID_RANDOM_LENGTH + 8)
        drawn += "".join(ID_ALPHABET[b % len(ID_ALPHABET)] for b in randomness if b < _EVEN_BYTES)
    return prefix + drawn[:ID_RANDOM_LENGTH]


def new_charge_id() -> str:
    return new_id("ch_")


def new_refund_id() -> str:
    return new_id("re_")


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
    payment_intent = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",  # raw loaders (the benchmark's) that do not name it get none
        help_text="The PaymentIntent (pi_...) this charge belongs to; blank for a charge "
        "made without one. Several charges (a decline, then a success) may share one.",
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
        is open (refunding it would give the money back twice: the dispute takes it too),
        `charge_already_refunded` when nothing is left; None when a refund may be made.
        The one statement of the rule: the service refuses by it under the charge's lock,
        and the admin offers refunds by it."""
        if self.status != self.Status.SUCCEEDED:
            return "charge_not_refundable"
        if self.dispute_open:
            return "charge_disputed"
        if self.amount_refundable <= 0:
            return "charge_already_refunded"
        return None

    @property
    def dispute_open(self) -> bool:
        return self.dispute_status in OPEN_DISPUTE_STATUSES

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

    # Statuses whose amount counts in the charge's amount_refunded: money that left, may
    # have left, or waits for approval. A provider's "no" (failed) or a cancellation
    # (rejected, or not approved in time) releases it.
    LIVE_STATUSES = (
        MovementStatus.PENDING,
        MovementStatus.SUCCEEDED,
        MovementStatus.UNKNOWN,
        MovementStatus.AWAITING_APPROVAL,
    )

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
    destination_reference = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text="The card network's reference for the refund (its acquirer reference "
        "number, ARN), once the provider has it: what the customer's bank traces it by.",
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


class RefundApproval(Refund):
    """Refunds over their requester's limit, waiting for another person to decide."""

    class Meta:
        proxy = True
        verbose_name = "refund awaiting approval"
        verbose_name_plural = "refunds awaiting approval"


class RefundLimit(models.Model):
    """In one currency, the most one refund may be and the most one requester may refund in
    a day (UTC) without another person's approval, for a group, a user or an API key. A
    user's own limit wins over their groups'; among several groups the highest counts.
    Blank: no limit of that kind. No row at all: no limit (refunds go straight through);
    rows in other currencies only: every refund in this one waits for approval, unless
    REFUND_LIMIT_OTHER_CURRENCIES=allow (services/limits.py:limits_in)."""

    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        "ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="limits"
    )
    currency = models.CharField(max_length=3, help_text="Lower-case ISO 4217 code, e.g. usd.")
    per_refund = models.BigIntegerField(
        null=True, blank=True, help_text="Minor units: the most one refund may be."
    )
    per_day = models.BigIntegerField(
        null=True, blank=True, help_text="Minor units: the most one requester may refund a day."
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(group__isnull=False, user__isnull=True, api_key__isnull=True)
                    | Q(group__isnull=True, user__isnull=False, api_key__isnull=True)
                    | Q(group__isnull=True, user__isnull=True, api_key__isnull=False)
                ),
                name="refundlimit_one_subject",
            ),
            models.CheckConstraint(
                condition=(Q(per_refund__isnull=True) | Q(per_refund__gt=0))
                & (Q(per_day__isnull=True) | Q(per_day__gt=0)),
                name="refundlimit_positive",
            ),
            models.UniqueConstraint(fields=["group", "currency"], name="refundlimit_group"),
            models.UniqueConstraint(fields=["user", "currency"], name="refundlimit_user"),
            models.UniqueConstraint(fields=["api_key", "currency"], name="refundlimit_api_key"),
        ]

    def __str__(self) -> str:
        subject = self.group or self.user or self.api_key
        return f"{subject} ({self.currency.upper()})"


class RefundAttention(Refund):
    """Refunds support should look at: unknown, failed, or pending with no dispatcher."""

    class Meta:
        proxy = True
        verbose_name = "refund needing attention"
        verbose_name_plural = "refunds needing attention"


class IdempotencyOperation(models.TextChoices):
    REFUND_CREATE = "refund.create", "Create a refund"
    CHARGE_CREATE = "charge.create", "Create a charge"


# The owner of every key the back office itself uses (admin forms, commands, bulk files,
# demo data): one owner, so a file re-run by another operator replays. An API key owns
# its own keys under its label, `api_key:<prefix>` (services/idempotency.py owner_of).
BACK_OFFICE_KEYS = "backoffice"
# Charge keys made by some API key before keys had owners, when migration 0029 could not
# tell which: any API key's retry with the same key still replays them
# (services/idempotency.py find_legacy_replay), so no retry charges twice.
LEGACY_CLIENT_KEYS = "legacy"


class IdempotencyRecord(models.Model):
    """One row per idempotency key and owner, shared by every interface: keys belong to
    their owner (an API key, or the back office), as Stripe scopes them to an account."""

    Operation = IdempotencyOperation
    BACK_OFFICE = BACK_OFFICE_KEYS
    LEGACY_CLIENT = LEGACY_CLIENT_KEYS

    owner = models.CharField(
        max_length=64,
        default=BACK_OFFICE_KEYS,
        help_text="Whose key it is: api_key:<prefix> for an API client, backoffice for the "
        "back office's own (admin forms, commands), legacy for a charge key some API key "
        "made before keys had owners.",
    )
    key = models.CharField(max_length=255)
    operation = models.CharField(max_length=32, choices=Operation)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the request as sent.")
    request_params = models.JSONField(help_text="The request as sent, omitted fields as null.")
    refund = models.ForeignKey(
        Refund,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="idempotency_records",
    )
    charge = models.ForeignKey(
        Charge,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="idempotency_records",
        help_text="The charge a charge.create request made.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Each owner's keys are its own: another client's key is another request.
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_owner_key_unique"),
            # A record is bound to exactly what its request made, from its first insert.
            models.CheckConstraint(
                condition=(
                    Q(
                        operation=IdempotencyOperation.REFUND_CREATE,
                        refund__isnull=False,
                        charge__isnull=True,
                    )
                    | Q(
                        operation=IdempotencyOperation.CHARGE_CREATE,
                        charge__isnull=False,
                        refund__isnull=True,
                    )
                ),
                name="idempotency_record_bound",
            ),
        ]

    def __str__(self) -> str:
        return self.key


class LedgerEntryQuerySet(models.QuerySet["LedgerEntry"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never updated.")

    def delete(self) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never deleted.")


class LedgerEntry(models.Model):
    """Append-only history: one row per money-moving moment, written with the state change.

    `refunded_delta` is the change the moment made to the charge's amount_refunded, so
    summing it per charge must give amount_refunded back (verify_ledger checks this).
    On PostgreSQL a trigger refuses UPDATE and DELETE on this table.
    """

    class Kind(models.TextChoices):
        CHARGE_SUCCEEDED = "charge_succeeded", "Charge succeeded"
        REFUND_RESERVED = "refund_reserved", "Refund reserved"
        REFUND_SUCCEEDED = "refund_succeeded", "Refund succeeded"
        REFUND_RELEASED = "refund_released", "Refund released"

    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="ledger_entries")
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    kind = models.CharField(max_length=32, choices=Kind)
    amount = models.BigIntegerField(help_text="Minor units moved at this moment.")
    refunded_delta = models.BigIntegerField(help_text="Change to the charge's amount_refunded.")
    currency = models.CharField(max_length=3)
    actor = models.CharField(max_length=200, blank=True)
    memo = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "ledger entries"
        permissions = [("export_ledgerentry", "Can export ledger entries as CSV")]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="ledger_amount_positive"),
            # Each kind moves amount_refunded in exactly one way.
            models.CheckConstraint(
                condition=(
                    Q(kind="refund_reserved", refunded_delta=F("amount"), refund__isnull=False)
                    | Q(kind="refund_released", refunded_delta=-F("amount"), refund__isnull=False)
                    | Q(kind="refund_succeeded", refunded_delta=0, refund__isnull=False)
                    | Q(kind="charge_succeeded", refunded_delta=0, refund__isnull=True)
                ),
                name="ledger_delta_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount} {self.currency} on {self.charge_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # An integrity guard, not business logic: an existing entry is never rewritten.
        if not self._state.adding:
            raise TypeError("Ledger entries are append-only; they are never updated.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("Ledger entries are append-only; they are never deleted.")


class ApiKey(models.Model):
    """An API client's key. Only a SHA-256 hash of the secret is stored; the prefix
    identifies the key in lists and logs. Secrets are 190 random bits, so a fast hash is
    enough: there is nothing to guess."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    read_only = models.BooleanField(default=False)
    api_version = models.CharField(
        max_length=32,
        default=api_versions.account_default,
        help_text="The Stripe API version its requests get without a Stripe-Version header.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class StaffPreference(models.Model):
    """What one staff member chose for how the admin shows things to them: the zone they
    read times in (blank: settings.ADMIN_TIME_ZONE). Set on the admin's Time zone page."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_preference"
    )
    time_zone = models.CharField(
        max_length=64, blank=True, help_text="An IANA name such as Europe/Paris."
    )

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone or 'default zone'})"


def new_event_id() -> str:
    return new_id("evt_")


def new_endpoint_id() -> str:
    return new_id("we_")


class EventType(models.TextChoices):
    """Stripe's names for what happened to a charge or refund."""

    CHARGE_SUCCEEDED = "charge.succeeded", "Charge succeeded"
    CHARGE_FAILED = "charge.failed", "Charge failed"
    CHARGE_REFUNDED = "charge.refunded", "Charge refunded"
    CHARGE_UPDATED = "charge.updated", "Charge updated"
    REFUND_CREATED = "refund.created", "Refund created"
    REFUND_UPDATED = "refund.updated", "Refund updated"
    REFUND_FAILED = "refund.failed", "Refund failed"


class Event(models.Model):
    """The outbox: one row per state change of a charge or refund, appended in the same
    transaction as the change (no event without its change, no change without its event),
    shaped as Stripe's event. `data_object` is the object as it was right after the
    change; `previous_attributes` the fields the change moved, as they were before."""

    Type = EventType

    id = models.CharField(primary_key=True, max_length=64, default=new_event_id, editable=False)
    type = models.CharField(max_length=64, choices=EventType)
    data_object = models.JSONField()
    previous_attributes = models.JSONField(null=True, blank=True)
    request_id = models.CharField(
        max_length=64, blank=True, help_text="The API request that caused it, if one did."
    )
    request_idempotency_key = models.CharField(max_length=255, blank=True)
    charge = models.ForeignKey(
        Charge, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["type", "-created_at"], name="event_type_created")]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class WebhookEndpoint(models.Model):
    """Where client systems want events sent. The secret signs every delivery; the API
    shows it once, when the endpoint is created."""

    class Status(models.TextChoices):
        ENABLED = "enabled", "Enabled"
        DISABLED = "disabled", "Disabled"

    id = models.CharField(primary_key=True, max_length=64, default=new_endpoint_id, editable=False)
    url = models.CharField(max_length=2048)
    enabled_events = models.JSONField(default=list, help_text='Event types, or ["*"] for all.')
    api_version = models.CharField(
        max_length=32,
        default=api_versions.account_default,
        help_text="The Stripe API version its events are rendered in.",
    )
    description = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status, default=Status.ENABLED)
    # Encrypted at rest (ledger_app/encryption.py, docs/operating/secrets.md).
    secret = EncryptedSecretField(editable=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="Deleted endpoints receive nothing more."
    )
    api_key = models.ForeignKey(
        "ApiKey",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.SET_NULL,
        related_name="webhook_endpoints",
        help_text="The API key that made it (none: the back office itself); it counts "
        "against that key's WEBHOOK_ENDPOINTS_PER_KEY.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return f"{self.id} {self.url}"

    def wants(self, event_type: str) -> bool:
        """Whether it is sent an event recorded as `event_type`: under the name its API
        version gives that event (api_versions.told_as; some are not sent to older ones)."""
        told = api_versions.told_as(self.api_version, event_type)
        if told is None:
            return False
        return "*" in self.enabled_events or told in self.enabled_events


class WebhookDelivery(models.Model):
    """One event on its way to one endpoint, delivered at least once: claimed with a lease
    like a refund, retried with backoff on errors, non-2xx answers and timeouts, and given
    up on (`failed`) when it is older than the retry window."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"  # after the retry window
        CANCELED = "canceled", "Canceled"  # the endpoint was deleted before it was delivered

    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.PROTECT, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    leased_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The receiver's last HTTP status."
    )
    last_error = models.TextField(blank=True, help_text="The last failure, in a line.")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "endpoint"], name="delivery_once_per_endpoint"
            ),
        ]
        permissions = [("resend_webhookdelivery", "Can resend webhook deliveries")]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}"


class ProviderEvent(models.Model):
    """An event the payment provider sent to /webhooks/stripe, stored once by its id: a
    repeat is acknowledged and changes nothing."""

    id = models.CharField(primary_key=True, max_length=255)
    type = models.CharField(max_length=100)
    payload = models.JSONField()
    outcome = models.TextField(blank=True, help_text="What the ledger did with it.")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class RateCounter(models.Model):
    """What one key (an API key, a client address) used in one fixed window of a rate
    limit, counted here so that every process and machine shares one count
    (services/rate_counters.py). Rows are short-lived: windows that ended are purged."""

    pk = models.CompositePrimaryKey("key", "window_started_at")
    key = models.CharField(max_length=255)
    window_started_at = models.DateTimeField()
    window_ends_at = models.DateTimeField(db_index=True)  # the purge deletes by it
    count = models.PositiveIntegerField()

    class Meta:
        db_table = "ledger_app_ratecounter"  # named in rate_counters.py's one statement

    def __str__(self) -> str:
        return f"{self.key} {self.window_started_at:%Y-%m-%d %H:%M:%S}: {self.count}"


class JobLease(models.Model):
    """A job that one process at a time may run (purge_expired), whoever starts it: the
    process that claims the row with one conditional UPDATE holds it until `leased_until`,
    renews it while it works, and frees it when it ends; a process that dies leaves it to
    run out. `last_finished_at` is when a whole run last ended (the refund worker's daily
    schedule reads it). services/job_leases.py."""

    name = models.CharField(primary_key=True, max_length=64)
    holder = models.CharField(
        max_length=200, blank=True, help_text="host:pid:token of the process that holds it."
    )
    leased_until = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
