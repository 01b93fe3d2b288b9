"""The card network behind the simulated provider: it gives a refund's acquirer reference
number (ARN) some time after the refund succeeded, as real networks do.

Until SIMULATED_ARN_DELAY_SECONDS have passed since the refund was made there is none;
after that, a refund that succeeded (and has not failed since) has one, always the same:
23 digits, as real ARNs are, derived from its provider id. With the delay at 0 the
refund's own answer carries it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from simulated_provider.models import ProviderRefund

ARN_DIGITS = 23


def acquirer_reference(record: ProviderRefund, now: datetime | None = None) -> str:
    """The refund's ARN as the provider knows it at `now` (default: now); "" for none yet."""
    if record.status != ProviderRefund.Status.SUCCEEDED:
        return ""
    waited = (now or timezone.now()) - record.created_at
    if waited < timedelta(seconds=settings.SIMULATED_ARN_DELAY_SECONDS):
        return ""
    digest = hashlib.sha256(f"arn:{record.provider_id}".encode()).digest()
    return str(int.from_bytes(digest, "big") % 10**ARN_DIGITS).zfill(ARN_DIGITS)


def destination_details(record: ProviderRefund, now: datetime | None = None) -> dict:
    """The refund's `destination_details` as Stripe shows a card refund's."""
    reference = acquirer_reference(record, now)
    return {
        "type": "card",
        "card": {
            "reference": reference or None,
            "reference_status": "available" if reference else "pending",
            "reference_type": "acquirer_reference_number",
            "type": "refund",
        },
    }
