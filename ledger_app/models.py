"""Where Django finds the app's models: each is defined in its domain's room
(`ledger_app/<domain>/models.py`, docs/architecture.md) and named here, so that
`ledger_app.models.X` (the migrations' references, the tests) still finds it. Code in
`ledger_app` imports from the room, never from here (.importlinter)."""

from ledger_app.access.models import ApiKey, StaffPreference
from ledger_app.approvals.models import RefundApproval, RefundAttention, RefundLimit
from ledger_app.books.models import BalanceTransaction, BooksDay, BooksDifference, Payout
from ledger_app.charges.models import (
    DISPUTE_STATUSES,
    OPEN_DISPUTE_STATUSES,
    PAYMENT_INTENT_ID,
    Charge,
    MovementStatus,
    ProviderMovement,
    new_charge_id,
    new_payment_intent_id,
)
from ledger_app.customer_mail.models import CustomerMail, MailAddressChange
from ledger_app.disputes.models import Dispute
from ledger_app.events.models import (
    Event,
    EventType,
    WebhookDelivery,
    WebhookEndpoint,
    new_endpoint_id,
    new_event_id,
)
from ledger_app.idempotency.models import (
    BACK_OFFICE_KEYS,
    LEGACY_CLIENT_KEYS,
    IdempotencyOperation,
    IdempotencyRecord,
)
from ledger_app.ids import ID_ALPHABET, ID_RANDOM_LENGTH, new_id
from ledger_app.ledger.models import LedgerEntry, LedgerEntryQuerySet
from ledger_app.mirror.models import ProviderSyncCursor
from ledger_app.operations.models import JobLease, RateCounter
from ledger_app.provider.models import ProviderEvent
from ledger_app.refunds.models import Refund, RefundReason, new_refund_id

__all__ = [
    "ApiKey",
    "BACK_OFFICE_KEYS",
    "BalanceTransaction",
    "BooksDay",
    "BooksDifference",
    "Charge",
    "CustomerMail",
    "DISPUTE_STATUSES",
    "Dispute",
    "Event",
    "EventType",
    "ID_ALPHABET",
    "ID_RANDOM_LENGTH",
    "IdempotencyOperation",
    "IdempotencyRecord",
    "JobLease",
    "ProviderSyncCursor",
    "LEGACY_CLIENT_KEYS",
    "LedgerEntry",
    "MailAddressChange",
    "LedgerEntryQuerySet",
    "MovementStatus",
    "OPEN_DISPUTE_STATUSES",
    "PAYMENT_INTENT_ID",
    "Payout",
    "ProviderEvent",
    "ProviderMovement",
    "RateCounter",
    "Refund",
    "RefundApproval",
    "RefundAttention",
    "RefundLimit",
    "RefundReason",
    "StaffPreference",
    "WebhookDelivery",
    "WebhookEndpoint",
    "new_charge_id",
    "new_endpoint_id",
    "new_event_id",
    "new_id",
    "new_payment_intent_id",
    "new_refund_id",
]
