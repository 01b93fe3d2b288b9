"""A card refund's acquirer reference number (ARN), as the provider states it: the one
guard every path that reads one from outside goes through (the Stripe gateway's answers
and lookups, the provider's webhooks), and the last check before one is stored.

Stripe gives it in a refund's `destination_details.card.reference` once the card network
has it, some time after the refund succeeded. Real ARNs are 23 digits; other networks'
references are other short tokens, so letters and digits are accepted. Anything else (too
long, empty, not a string, control or non-ASCII characters, another destination type) is
no reference: ignored, never an error, since a refund without one is a normal refund.
"""

from __future__ import annotations

import re
from typing import Any

MAX_LENGTH = 64  # Refund.destination_reference holds this many
REFERENCE = re.compile(rf"[A-Za-z0-9]{{1,{MAX_LENGTH}}}")


def card_reference(destination_details: Any) -> str:
    """The reference in a refund's `destination_details` (plain JSON, Stripe's shape:
    `{"type": "card", "card": {"reference": ...}}`), or "" when there is none or it is
    not a short token of ASCII letters and digits."""
    if not isinstance(destination_details, dict) or destination_details.get("type") != "card":
        return ""
    card = destination_details.get("card")
    return guarded_reference(card.get("reference") if isinstance(card, dict) else None)


def guarded_reference(value: Any) -> str:
    """`value` if it is a reference we may store and show, else ""."""
    if type(value) is not str or REFERENCE.fullmatch(value) is None:
        return ""
    return value
