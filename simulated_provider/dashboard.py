"""What the simulated provider does on its own, as a real one's checkout and dashboard do:
take a payment, refund part of a charge. Each is written in its own books and told to the
back office only as Stripe tells it (a signed webhook, unless the news is to be lost), never
by calling the back office's code."""

from __future__ import annotations

import secrets

from django.db import transaction
from django.db.models import Sum

from simulated_provider import books
from simulated_provider.models import ProviderCharge, ProviderObject, ProviderRefund

# Its own refunds that hold money of a charge: done, or still going.
LIVE = (ProviderObject.Status.SUCCEEDED, ProviderObject.Status.PENDING)


class Refused(Exception):
    """What the provider's own dashboard would refuse: nothing is written."""


def take_payment(*, amount: int, currency: str, description: str = "") -> ProviderCharge:
    """A card payment through the merchant's checkout: a succeeded charge of the provider's."""
    if amount <= 0:
        raise Refused(f"the amount must be a positive number of minor units, not {amount}")
    if not (len(currency) == 3 and currency.isalpha()):
        raise Refused(f"{currency[:10]!r} is not a currency code")
    charge_id = "ch_sim_" + secrets.token_hex(12)
    with transaction.atomic():
        charge = ProviderCharge.objects.create(
            provider_id=charge_id,
            idempotency_key=f"checkout:{charge_id}",
            fingerprint="",
            amount=amount,
            currency=currency.lower(),
            status=ProviderObject.Status.SUCCEEDED,
            description=description,
        )
        books.book_charge(charge)
    return charge


def refund_from_dashboard(*, charge_id: str, amount: int) -> ProviderRefund:
    """A refund made in the provider's dashboard: at most what its own books have left of
    the charge (it refuses more, as a real provider does), with no metadata of ours."""
    with transaction.atomic():
        charge = ProviderCharge.objects.select_for_update().filter(provider_id=charge_id).first()
        if charge is None or charge.status != ProviderObject.Status.SUCCEEDED:
            raise Refused(f"no succeeded charge {charge_id[:64]!r} at the provider")
        refunded = ProviderRefund.objects.filter(charge_reference=charge_id, status__in=LIVE)
        left = charge.amount - (refunded.aggregate(total=Sum("amount"))["total"] or 0)
        if not 0 < amount <= left:
            raise Refused(f"refund of {amount} refused: {left} is left of charge {charge_id}")
        refund_id = "re_sim_" + secrets.token_hex(12)
        refund = ProviderRefund.objects.create(
            provider_id=refund_id,
            idempotency_key=f"dashboard:{refund_id}",
            fingerprint="",
            amount=amount,
            currency=charge.currency,
            status=ProviderObject.Status.SUCCEEDED,
            charge_reference=charge_id,
        )
        books.book_refund(refund)
        return refund
