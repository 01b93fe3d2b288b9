"""A dispute as the API shows it (Stripe's `dispute` object): what an event about it carries
to our webhook endpoints. Its charge is named by our id, as every object here names it."""

from __future__ import annotations

from typing import Any

from ledger_app.disputes.models import Dispute
from ledger_app.rendering.books import balance_transaction_shape
from ledger_app.rendering.fields import unix


def render_dispute(dispute: Dispute) -> dict[str, Any]:
    charge = dispute.charge
    return {
        "id": dispute.id,
        "object": "dispute",
        "amount": dispute.amount,
        "balance_transactions": [
            balance_transaction_shape(
                id=moved["id"],
                amount=moved["amount"],
                available_on=moved["created"],
                created=moved["created"],
                currency=dispute.currency,
                fee=moved["fee"],
                net=moved["amount"] - moved["fee"],
                reporting_category=moved["reporting_category"],
                source=dispute.id,
                status="available",
                type="adjustment",
            )
            for moved in dispute.balance_transactions
        ],
        "charge": charge.pk,
        "created": unix(dispute.created_at),
        "currency": dispute.currency,
        "enhanced_eligibility_types": [],
        "evidence": {},
        "evidence_details": {
            "due_by": None,
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
        },
        "intended_submission_method": None,
        "is_charge_refundable": dispute.is_charge_refundable,
        "livemode": False,
        "metadata": {},
        "payment_intent": charge.payment_intent or None,
        "reason": dispute.reason or "general",
        "status": dispute.status,
    }
