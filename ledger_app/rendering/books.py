"""The provider's balance transactions and payouts as the API shows them: Stripe's
`balance_transaction` and `payout` objects, from what the books mirrored (ledger_app/books).
BalanceTransactionSerializer's and PayoutSerializer's declared fields are their OpenAPI
schema; render_balance_transaction and render_payout draw them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.rendering.fields import (
    FALSE,
    NULL_INTEGER,
    BlankAsNull,
    Fixed,
    StripeList,
    StripeObject,
    unix,
)

FEE_DESCRIPTIONS = {"adjustment": "Dispute fee"}
# Stripe's values of a balance transaction's `type` (its spec's enum), which
# GET /v1/balance_transactions?type= takes.
BALANCE_TRANSACTION_TYPES = (
    "adjustment",
    "advance",
    "advance_funding",
    "anticipation_repayment",
    "application_fee",
    "application_fee_refund",
    "charge",
    "climate_order_purchase",
    "climate_order_refund",
    "connect_collection_transfer",
    "contribution",
    "fee_credit_funding",
    "inbound_transfer",
    "inbound_transfer_reversal",
    "issuing_authorization_hold",
    "issuing_authorization_release",
    "issuing_dispute",
    "issuing_dispute_provisional_credit",
    "issuing_dispute_provisional_credit_reversal",
    "issuing_transaction",
    "obligation_outbound",
    "obligation_reversal_inbound",
    "payment",
    "payment_failure_refund",
    "payment_network_reserve_hold",
    "payment_network_reserve_release",
    "payment_refund",
    "payment_reversal",
    "payment_unreconciled",
    "payout",
    "payout_cancel",
    "payout_failure",
    "payout_minimum_balance_hold",
    "payout_minimum_balance_release",
    "refund",
    "refund_failure",
    "reserve_hold",
    "reserve_release",
    "reserve_transaction",
    "reserved_funds",
    "stripe_balance_payment_debit",
    "stripe_balance_payment_debit_reversal",
    "stripe_fee",
    "stripe_fx_fee",
    "tax_fee",
    "tax_fund",
    "topup",
    "topup_reversal",
    "transfer",
    "transfer_cancel",
    "transfer_failure",
    "transfer_refund",
)
# Stripe's statuses of a payout, which GET /v1/payouts?status= takes.
PAYOUT_STATUSES = ("paid", "pending", "in_transit", "canceled", "failed")


class FeeDetailSerializer(serializers.Serializer):
    amount = serializers.IntegerField(help_text="Minor units.")
    application = Fixed()
    currency = serializers.CharField()
    description = serializers.CharField()
    type = serializers.CharField(help_text="stripe_fee: what the provider kept.")


class BalanceTransactionSerializer(StripeObject):
    """A movement of the merchant's balance at the provider, as it listed it and
    sync_provider mirrored it. Read only: the provider makes them."""

    id = serializers.CharField(help_text="The provider's id (txn_...).")
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units, signed: a refund's is negative.")
    available_on = serializers.IntegerField(
        help_text="Unix seconds: when the provider makes it available to pay out."
    )
    balance_type = Fixed("payments", {"type": "string", "enum": ["payments"]})
    created = serializers.IntegerField(help_text="Unix seconds: when the provider made it.")
    currency = serializers.CharField()
    description = BlankAsNull()
    exchange_rate = Fixed(schema={"type": "number", "nullable": True})
    fee = serializers.IntegerField(help_text="Minor units the provider kept.")
    fee_details = FeeDetailSerializer(many=True)
    net = serializers.IntegerField(help_text="amount - fee.")
    reporting_category = serializers.CharField()
    source = BlankAsNull(  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)
        help_text="The provider's id of the charge, refund, dispute or payout that moved it."
    )
    status = serializers.CharField(help_text="available or pending.")
    type = serializers.CharField(
        help_text="Stripe's: charge, refund, refund_failure, adjustment, payout..."
    )

    def to_representation(self, instance: BalanceTransaction) -> dict[str, Any]:
        return render_balance_transaction(instance)


class BalanceTransactionListSerializer(StripeList):
    data = BalanceTransactionSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


class PayoutSerializer(StripeObject):
    """Money the provider sent to the merchant's bank (negative: took from it), as it
    listed it and sync_provider mirrored it. Read only: the provider makes them."""

    id = serializers.CharField(help_text="The provider's id (po_...).")
    object = serializers.CharField(read_only=True)
    amount = serializers.IntegerField(help_text="Minor units.")
    application_fee = Fixed()
    application_fee_amount = Fixed(schema=NULL_INTEGER)
    arrival_date = serializers.IntegerField(help_text="Unix seconds: the day it arrives.")
    automatic = serializers.BooleanField()
    balance_transaction = BlankAsNull(help_text="Its own balance transaction (txn_...).")
    created = serializers.IntegerField(help_text="Unix seconds: when the provider made it.")
    currency = serializers.CharField()
    description = BlankAsNull()
    destination = Fixed(help_text="null: the back office does not hold bank accounts.")
    failure_balance_transaction = Fixed()
    failure_code = Fixed()
    failure_message = Fixed()
    livemode = Fixed(False, FALSE)
    metadata = Fixed({}, {"type": "object"})
    method = serializers.CharField(help_text="standard or instant.")
    original_payout = Fixed()
    payout_method = Fixed()
    reconciliation_status = serializers.CharField(
        help_text="completed for an automatic payout: GET /v1/balance_transactions?payout= "
        "lists what it paid out; not_applicable for another."
    )
    reversed_by = Fixed()
    source_type = Fixed("card", {"type": "string"})
    statement_descriptor = Fixed()
    status = serializers.CharField(help_text="paid, pending, in_transit, canceled or failed.")
    trace_id = Fixed(schema={"type": "object", "nullable": True})
    type = serializers.CharField(help_text="bank_account or card.")

    def to_representation(self, instance: Payout) -> dict[str, Any]:
        return render_payout(instance)


class PayoutListSerializer(StripeList):
    data = PayoutSerializer(many=True)  # type: ignore[assignment]  # a declared field (the metaclass takes it off the class)


def render_balance_transaction(bt: BalanceTransaction) -> dict[str, Any]:
    """A balance transaction as the API shows it: BalanceTransactionSerializer's fields,
    in their order."""
    return balance_transaction_shape(
        id=bt.id,
        amount=bt.amount,
        available_on=unix(bt.available_on),
        created=unix(bt.created),
        currency=bt.currency,
        description=bt.description or None,
        fee=bt.fee,
        net=bt.net,
        reporting_category=bt.reporting_category,
        source=bt.source or None,
        status=bt.status or "available",
        type=bt.type,
    )


def balance_transaction_shape(
    *, fee: int, currency: str, type: str, **fields: Any
) -> dict[str, Any]:
    """Stripe's balance transaction object, its fields in Stripe's order; its one fee, when
    it has one, as Stripe's stripe_fee."""
    details = [
        {
            "amount": fee,
            "application": None,
            "currency": currency,
            "description": FEE_DESCRIPTIONS.get(type, "Stripe processing fees"),
            "type": "stripe_fee",
        }
    ]
    return {
        "id": fields["id"],
        "object": "balance_transaction",
        "amount": fields["amount"],
        "available_on": fields["available_on"],
        "balance_type": "payments",
        "created": fields["created"],
        "currency": currency,
        "description": fields.get("description"),
        "exchange_rate": None,
        "fee": fee,
        "fee_details": details if fee else [],
        "net": fields["net"],
        "reporting_category": fields["reporting_category"],
        "source": fields.get("source"),
        "status": fields["status"],
        "type": type,
    }


def render_payout(payout: Payout) -> dict[str, Any]:
    """A payout as the API shows it: PayoutSerializer's fields, in their order."""
    return {
        "id": payout.id,
        "object": "payout",
        "amount": payout.amount,
        "application_fee": None,
        "application_fee_amount": None,
        "arrival_date": unix(payout.arrival_date),
        "automatic": payout.automatic,
        "balance_transaction": payout.balance_transaction or None,
        "created": unix(payout.created),
        "currency": payout.currency,
        "description": payout.description or None,
        "destination": None,
        "failure_balance_transaction": None,
        "failure_code": None,
        "failure_message": None,
        "livemode": False,
        "metadata": {},
        "method": payout.method or "standard",
        "original_payout": None,
        "payout_method": None,
        # The books keep an automatic payout with what the provider listed it paid out.
        "reconciliation_status": "completed" if payout.automatic else "not_applicable",
        "reversed_by": None,
        "source_type": "card",
        "statement_descriptor": None,
        "status": payout.status or "paid",
        "trace_id": None,
        "type": payout.type or "bank_account",
    }
