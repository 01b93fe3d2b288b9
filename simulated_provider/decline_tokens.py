"""Stripe's documented test tokens that decline a charge, as the simulated provider (the
demo's) answers them: `source=tok_chargeDeclined` on POST /v1/charges is declined with
Stripe's codes, so code written against Stripe's test mode meets its declines here too.

Each token in both of Stripe's spellings (`tok_chargeDeclined` and
`tok_visa_chargeDeclined`) gives its decline code (the card error's `code` follows from
it: ledger_app/api/errors.py, CARD_ERROR_CODES)."""

from __future__ import annotations

DECLINE_CODES = {
    "chargeDeclined": "generic_decline",
    "chargeDeclinedInsufficientFunds": "insufficient_funds",
    "chargeDeclinedLostCard": "lost_card",
    "chargeDeclinedStolenCard": "stolen_card",
    "chargeDeclinedFraudulent": "fraudulent",
    "chargeDeclinedExpiredCard": "expired_card",
    "chargeDeclinedIncorrectCvc": "incorrect_cvc",
    "chargeDeclinedProcessingError": "processing_error",
    "chargeDeclinedVelocityLimitExceeded": "card_velocity_exceeded",
    "riskLevelHighest": "highest_risk_level",
}


def decline_code(source: object) -> str | None:
    """The decline code of a test token (None: not one that declines)."""
    if not isinstance(source, str):
        return None
    name = source.removeprefix("tok_visa_").removeprefix("tok_")
    if name == source:
        return None
    return DECLINE_CODES.get(name)
