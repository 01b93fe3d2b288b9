"""Domain errors, each with a stable `code` and the `param` it concerns."""

from __future__ import annotations

from ledger_app.events.models import EventType


class LedgerError(Exception):
    code = "ledger_error"
    param: str | None = None
    default_message = "The request was refused."

    def __init__(self, message: str | None = None, *, param: str | None = None) -> None:
        self.message = message or self.default_message
        if param is not None:
            self.param = param
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidAmount(LedgerError):
    code = "invalid_amount"
    param = "amount"
    default_message = "Amount must be a positive whole number of minor units."


class AmountTooLarge(LedgerError):
    code = "amount_too_large"
    param = "amount"
    default_message = "Refund amount is greater than the amount left to refund on the charge."


class AmountAboveCeiling(AmountTooLarge):
    """A charge larger than its currency's ceiling (settings.AMOUNT_CEILINGS): the same
    stable code as Stripe's for an amount over its maximum."""

    default_message = "Amount is larger than a charge in this currency may be."


class ChargeAlreadyRefunded(LedgerError):
    code = "charge_already_refunded"
    param = "charge"
    default_message = "The charge has already been refunded in full."


class ChargeNotRefundable(LedgerError):
    code = "charge_not_refundable"
    param = "charge"
    default_message = "Only a succeeded charge can be refunded."


class ChargeDisputed(LedgerError):
    code = "charge_disputed"
    param = "charge"
    default_message = (
        "The charge has an open dispute: refunding it would give the money back twice."
    )


class ChargeDisagreesWithProvider(LedgerError):
    code = "charge_disagrees_with_provider"
    param = "charge"
    default_message = (
        "The provider reports refunds of this charge that the ledger has no room for: no "
        "refund is made until a lead resolves it."
    )


class ResourceMissing(LedgerError):
    code = "resource_missing"
    param = "charge"
    default_message = "No such charge."


class InvalidIdempotencyKey(LedgerError):
    code = "invalid_idempotency_key"
    param = "idempotency_key"
    default_message = "Idempotency key must be 1 to 255 characters with no control characters."


class IdempotencyKeyReserved(LedgerError):
    code = "idempotency_key_reserved"
    param = "idempotency_key"
    default_message = "This idempotency key is in a namespace the back office keeps for itself."


class IdempotencyKeyReused(LedgerError):
    code = "idempotency_key_reused"
    param = "idempotency_key"
    default_message = (
        "This idempotency key was already used for a different request. "
        "A retry must repeat the original request exactly; a new request needs a new key."
    )


class InvalidReason(LedgerError):
    code = "invalid_reason"
    param = "reason"
    default_message = (
        "Reason must be one of duplicate, fraudulent, requested_by_customer, or empty."
    )


class InvalidMetadata(LedgerError):
    code = "invalid_metadata"
    param = "metadata"
    default_message = (
        "Metadata must be at most 50 string keys (up to 40 characters) "
        "with string values (up to 500 characters)."
    )


class InvalidNote(LedgerError):
    code = "invalid_note"
    param = "note"
    default_message = "Note must be text of at most 1000 characters."


class InvalidCurrency(LedgerError):
    code = "invalid_currency"
    param = "currency"
    default_message = "Currency must be a three-letter ISO 4217 code."


class InvalidChargeStatus(LedgerError):
    code = "invalid_charge_status"
    param = "status"
    default_message = "Charge status must be pending, succeeded, failed or unknown."


class InvalidPaymentIntent(LedgerError):
    code = "invalid_payment_intent"
    param = "payment_intent"
    default_message = "A PaymentIntent id is pi_ and letters, digits or underscores."


class PaymentIntentMismatch(LedgerError):
    """A refund naming a charge and a PaymentIntent the charge does not belong to."""

    code = "parameter_invalid"
    param = "payment_intent"
    default_message = "The charge does not belong to that PaymentIntent."


class InvalidCustomer(LedgerError):
    code = "invalid_customer"
    param = "customer"
    default_message = "Customer ID must be at most 255 characters with no control characters."


class InvalidDescription(LedgerError):
    code = "invalid_description"
    param = "description"
    default_message = "Description must be text of at most 1000 characters."


class InvalidEmail(LedgerError):
    """An address the customer mails cannot go to (Stripe's code for one)."""

    code = "email_invalid"
    param = "receipt_email"
    default_message = "That is not an e-mail address (at most 254 characters, name@domain)."


class MailNotFound(LedgerError):
    code = "mail_not_found"
    param = "refund"
    default_message = "No mail was written for this refund, so there is none to resend."


class MailNotSentYet(LedgerError):
    code = "mail_not_sent_yet"
    param = "refund"
    default_message = "The refund's last mail is still waiting to be sent: it goes out by itself."


class IdempotencyKeyInUse(LedgerError):
    code = "idempotency_key_in_use"
    param = "idempotency_key"
    default_message = (
        "A request with this idempotency key is still being processed. "
        "Retry with the same key shortly; it will replay that request's result."
    )


class LockTimeout(LedgerError):
    code = "lock_timeout"
    param = "charge"
    default_message = "The charge is busy with other refunds. Retry with the same key shortly."


class ImportConflict(LedgerError):
    code = "import_conflict"
    param = "id"
    default_message = "A charge with this id exists with another amount or currency."


class InvalidCreated(LedgerError):
    code = "invalid_created"
    param = "created"
    default_message = "created must be unix seconds or an ISO 8601 date and time."


class NoteRequired(LedgerError):
    code = "note_required"
    param = "note"
    default_message = "Say in the note what was done."


class RefundNotDeclined(LedgerError):
    code = "refund_not_declined"
    param = "refund"
    default_message = (
        "Only a refund the provider declined can be marked handled; a refund whose outcome "
        "is unknown or pending is settled by asking the provider (Reconcile now)."
    )


class RepeatOfEarlier(LedgerError):
    """The same charge was refunded the same amount a short while ago by another batch or
    person (an operator running yesterday's file again, a second ticket about one charge).
    `earlier` is that refund; the caller may insist (bulk_refund --allow-repeats, the
    admin's "Refund again anyway")."""

    code = "repeat_of_earlier"
    param = "amount"
    default_message = "This charge was refunded the same amount recently."

    def __init__(self, message: str | None = None, *, earlier=None) -> None:
        self.earlier = earlier
        super().__init__(message)


class ChargeChanged(LedgerError):
    code = "charge_changed"
    param = "charge"
    default_message = (
        "The charge changed since this form was shown. Nothing was refunded; check what is "
        "left and submit again."
    )


class InvalidWebhookUrl(LedgerError):
    code = "url_invalid"
    param = "url"
    default_message = "The URL must be http:// or https:// with a host."


class WebhookEndpointLimitReached(LedgerError):
    """As many webhook endpoints as WEBHOOK_ENDPOINTS_PER_KEY or WEBHOOK_ENDPOINTS_TOTAL
    allow already exist. (Stripe refuses one past its 16 with an invalid_request_error
    that has no code.)"""

    code = "webhook_endpoint_limit_reached"
    default_message = "The most webhook endpoints allowed already exist. Delete one first."


class WebhookEndpointsBusy(LedgerError):
    """Another endpoint was being created for longer than DATABASE_LOCK_TIMEOUT_MS: the
    charge's busy code (409, to retry), about no parameter."""

    code = "lock_timeout"
    default_message = "Another webhook endpoint is being created. Retry shortly."


KNOWN_EVENTS = ", ".join(EventType.values)


class InvalidApiVersion(LedgerError):
    code = "api_version_invalid"
    param = "api_version"
    default_message = "That is not a Stripe API version this server speaks."


class InvalidEnabledEvents(LedgerError):
    code = "invalid_enabled_events"
    param = "enabled_events"
    default_message = (
        "enabled_events must list event types Stripe documents (such as charge.updated or "
        f'payment_intent.succeeded; this back office sends {KNOWN_EVENTS}) or "*".'
    )


class DeliveryNotResendable(LedgerError):
    code = "delivery_not_resendable"
    param = "delivery"
    default_message = "The delivery's endpoint was deleted; it is not sent again."


class ApprovalNotPermitted(LedgerError):
    code = "approval_not_permitted"
    param = "refund"
    default_message = "Only someone with the approve permission decides refunds over a limit."


class ApprovalByRequester(LedgerError):
    code = "approval_by_requester"
    param = "refund"
    default_message = (
        "Four eyes: the person who asked for a refund cannot approve or reject it; another "
        "approver decides."
    )


class RefundNotAwaitingApproval(LedgerError):
    code = "refund_not_awaiting_approval"
    param = "refund"
    default_message = "This refund is not awaiting approval."


class RefundNotCancelable(LedgerError):
    code = "refund_not_cancelable"
    param = "refund"
    default_message = "Only a refund awaiting approval can be canceled."


class ApprovalExpired(LedgerError):
    code = "approval_expired"
    param = "refund"
    default_message = "This refund was not approved in time: it is canceled, its amount released."
