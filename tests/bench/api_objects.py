"""A refund and its charge as the API (and their events) show them, in the bench's own
shapes: what the limit's raw SQL writes into its events (limit.py), and what the purge
phase's and `make bench-year`'s expired events carry (databases.py, year_load.py)."""

from __future__ import annotations

NO_ADDRESS = dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state"))


def refund_object(refund: str, charge: str, created: int) -> dict:
    """A pending refund as the API (and its event) shows it: about 500 bytes of JSON."""
    return {
        "id": refund,
        "object": "refund",
        "amount": 1,
        "balance_transaction": None,
        "charge": charge,
        "created": created,
        "currency": "usd",
        "customer": None,
        "customer_account": None,
        "destination_details": None,
        "failure_reason": None,
        "metadata": {},
        "payment_intent": None,
        "payment_method": None,
        "reason": None,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "pending",
        "transfer_reversal": None,
    }


def charge_object(row: dict, refunded: int, refund: dict) -> dict:
    """The charge as the API shows it, with the new refund in its list: about 1.9 KB."""
    amount, currency, metadata = row["amount"], row["currency"], row["metadata"]
    charge, description, customer = row["id"], row["description"], row["customer"]
    created = int(row["created_at"].timestamp())
    return {
        "id": charge,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": refunded,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": None,
        "billing_details": {
            "address": NO_ADDRESS,
            "email": None,
            "name": None,
            "phone": None,
            "tax_id": None,
        },
        "calculated_statement_descriptor": None,
        "captured": True,
        "created": created,
        "currency": currency,
        "customer": customer or None,
        "description": description or None,
        "disputed": False,
        "failure_balance_transaction": None,
        "failure_code": None,
        "failure_message": None,
        "fraud_details": {},
        "livemode": False,
        "metadata": metadata,
        "on_behalf_of": None,
        "outcome": None,
        "paid": True,
        "payment_intent": None,
        "payment_method": None,
        "payment_method_details": None,
        "receipt_email": None,
        "receipt_number": None,
        "receipt_url": None,
        "refunded": refunded == amount,
        "refunds": {
            "object": "list",
            "data": [refund],
            "has_more": False,
            "url": f"/v1/charges/{charge}/refunds",
        },
        "review": None,
        "shipping": None,
        "source": None,
        "source_transfer": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": "succeeded",
        "transfer_data": None,
        "transfer_group": None,
    }
