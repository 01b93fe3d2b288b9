"""A refund as Stripe shapes it: RefundSerializer's declared fields are its OpenAPI
schema, render_refund draws it (rendering/fields.py says what Stripe's fields and values
here are)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ledger_app.refunds.models import Refund
from ledger_app.rendering.fields import (
    LEDGER_STATUS_HELP,
    BlankAsNull,
    ExpandableId,
    Fixed,
    StripeList,
    StripeObject,
    shown_metadata,
    shown_status,
    unix,
)

# Stripe's documented refund failure_reason values; a provider's other words are `unknown`.
FAILURE_REASONS = frozenset(
    {
        "lost_or_stolen_card",
        "expired_or_canceled_card",
        "charge_for_pending_refund_disputed",
        "insufficient_funds",
        "declined",
        "merchant_request",
        "unknown",
    }
)


class RefundSerializer(StripeObject):
    LEFT_OUT_WHEN_NULL = (
        "failure_balance_transaction",
        "failure_reason",
        "instructions_email",
        "pending_reason",
    )

    id = serializers.CharField()
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units.")
    application = Fixed()
    balance_transaction = BlankAsNull(
        help_text="The provider's balance transaction of this refund (txn_...), once the "
        "books matched it (GET /v1/balance_transactions/{id}); null before."
    )
    charge = ExpandableId("Charge", source="charge_id")
    created = serializers.IntegerField(read_only=True)
    currency = serializers.CharField()
    customer = Fixed()
    customer_account = Fixed()
    destination_details = Fixed(
        schema={"type": "object"},
        help_text="Where the money goes back: a card (`type: card`), with the card "
        "network's reference for the refund (`card.reference`, the acquirer reference "
        "number a customer's bank traces it by) once the provider has it "
        "(`card.reference_status`: pending, available, or unavailable for a refund that "
        "failed or was canceled).",
    )
    failure_balance_transaction = serializers.CharField(
        read_only=True,
        required=False,
        help_text="When it failed after its money had left: the provider's balance "
        "transaction that gave the money back, once the books matched it. Absent otherwise.",
    )
    failure_reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="When failed: lost_or_stolen_card, expired_or_canceled_card, "
        "insufficient_funds, declined, merchant_request, or unknown; when canceled, "
        "merchant_request. Absent otherwise.",
    )
    instructions_email = serializers.CharField(
        read_only=True,
        required=False,
        help_text="The address given with the refund for the customer's mails. Absent "
        "when none was.",
    )
    metadata = serializers.DictField(child=serializers.CharField())
    payment_intent = ExpandableId(
        "PaymentIntent", help_text="Its charge's PaymentIntent (pi_...), if it has one."
    )
    payment_method = Fixed()
    reason = BlankAsNull()
    receipt_number = Fixed()
    source_transfer_reversal = Fixed()
    status = serializers.CharField(
        read_only=True,
        help_text="pending, succeeded, failed or canceled. Pending is money reserved and "
        "not final: not sent or not answered yet, its outcome unknown (the reconciler asks "
        "the provider), or waiting for approval; ledger_status tells which.",
    )
    pending_reason = serializers.CharField(
        read_only=True,
        allow_null=True,
        required=False,
        help_text="processing while pending and sent or about to be; absent otherwise "
        "(waiting for approval: see ledger_status).",
    )
    transfer_reversal = Fixed()
    ledger_status = serializers.CharField(source="status", help_text=LEDGER_STATUS_HELP)

    def to_representation(self, instance: Refund) -> dict[str, Any]:
        return render_refund(instance)


def render_refund(refund: Refund) -> dict[str, Any]:
    """A refund as the API shows it: RefundSerializer's fields, in their order, each
    container new (the caller may keep or change it)."""
    status = refund.status
    shown: dict[str, Any] = {
        "id": refund.id,
        "object": "refund",
        "amount": refund.amount,
        "application": None,
        "balance_transaction": refund.balance_transaction or None,
        "charge": refund.charge_id or None,
        "created": unix(refund.created_at),
        "currency": refund.currency,
        "customer": None,
        "customer_account": None,
        "destination_details": destination_details(refund),
    }
    if status == Refund.Status.CANCELED:  # as Stripe shows a canceled refund
        shown["failure_reason"] = "merchant_request"
    elif status == Refund.Status.FAILED:
        detail = refund.status_detail
        if refund.failure_balance_transaction:  # it failed after its money had left
            shown["failure_balance_transaction"] = refund.failure_balance_transaction
        shown["failure_reason"] = detail if detail in FAILURE_REASONS else "unknown"
    if refund.instructions_email:  # as Stripe: present only when one was given
        shown["instructions_email"] = refund.instructions_email
    shown.update(
        metadata=shown_metadata(refund.metadata),
        payment_intent=refund.payment_intent or None,
        payment_method=None,
        reason=refund.reason or None,
        receipt_number=None,
        source_transfer_reversal=None,
        status=str(shown_status(status)),
    )
    if status in (Refund.Status.PENDING, Refund.Status.UNKNOWN):
        shown["pending_reason"] = "processing"
    shown.update(transfer_reversal=None, ledger_status=str(status))
    return shown


def destination_details(refund: Refund) -> dict[str, Any]:
    """Where a card refund goes back, as Stripe shows it: the network's reference (the
    acquirer reference number) once the provider has given it. Before the refund is sent
    and answered it is `pending`; a failed or canceled one has none to give."""
    status = refund.status
    card: dict[str, Any]
    if status in (Refund.Status.FAILED, Refund.Status.CANCELED):
        card = {"reference_status": "unavailable", "type": "refund"}
    elif status != Refund.Status.SUCCEEDED:
        card = {"reference_status": "pending", "type": "pending"}
    elif refund.destination_reference:
        card = {
            "reference": refund.destination_reference,
            "reference_status": "available",
            "reference_type": "acquirer_reference_number",
            "type": "refund",
        }
    else:
        card = {
            "reference_status": "pending",
            "reference_type": "acquirer_reference_number",
            "type": "refund",
        }
    return {"card": card, "type": "card"}


class RefundListSerializer(StripeList):
    data = RefundSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
