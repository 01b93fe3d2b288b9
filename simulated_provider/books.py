"""The simulated provider's own money books, kept as Stripe keeps a merchant's balance.

Every movement is a balance transaction (models.ProviderBalanceTransaction): a charge
(less its fee: CARD_FEE_PERCENT of the amount plus CARD_FEE_FIXED), a refund (when it is
made, pending or not), a refund's failure (the money comes back), a dispute's withdrawal
(the disputed amount and DISPUTE_FEE) and its reinstatement when won. Each is available
SIMULATED_PAYOUT_DELAY_DAYS after the day it was made (UTC), and paid out daily: one payout
per currency holding every available transaction not yet paid out, made by `pay_out`
(called before the provider lists its balance transactions or payouts, so the schedule
holds whoever looks). A payout of a balance that went negative is negative: the provider
takes it from the bank account.

Faults a charge's metadata plants, for the books' tests and demos: `simulate_books` =
`refund_other_amount` books its refunds one minor unit short; `refund_dropped` books none.
`stray_adjustment` books a movement nothing else knows of.
"""

from __future__ import annotations

import secrets
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from simulated_provider.models import (
    ProviderBalanceTransaction,
    ProviderCharge,
    ProviderDispute,
    ProviderPayout,
    ProviderRefund,
)

CARD_FEE_PERCENT = Decimal("2.9")
CARD_FEE_FIXED = 30
DISPUTE_FEE = 1500
FAULTS = ("refund_other_amount", "refund_dropped")


def book(
    kind: tuple[str, str],
    *,
    source: str,
    amount: int,
    currency: str,
    fee: int = 0,
    at: datetime | None = None,
) -> ProviderBalanceTransaction:
    """A balance transaction of `kind` (its type, its reporting category), made `at`."""
    moved, category = kind
    made = at or timezone.now()
    delay = timedelta(days=settings.SIMULATED_PAYOUT_DELAY_DAYS)
    return ProviderBalanceTransaction.objects.create(
        provider_id="txn_sim_" + secrets.token_hex(12),
        type=moved,
        reporting_category=category,
        source=source,
        amount=amount,
        fee=fee,
        net=amount - fee,
        currency=currency,
        created_at=made,
        available_on=made.astimezone(UTC).date() + delay,
    )


def card_fee(amount: int) -> int:
    percent = (Decimal(amount) * CARD_FEE_PERCENT / 100).quantize(Decimal(1), ROUND_HALF_UP)
    return int(percent) + CARD_FEE_FIXED


def book_charge(charge: ProviderCharge) -> None:
    book(
        ("charge", "charge"),
        source=charge.provider_id,
        amount=charge.amount,
        currency=charge.currency,
        fee=card_fee(charge.amount),
        at=charge.created_at,
    )


def book_refund(refund: ProviderRefund, fault: str = "") -> None:
    """A refund's debit, as made (`fault`: the charge's simulate_books)."""
    if fault == "refund_dropped":
        return
    amount = refund.amount - 1 if fault == "refund_other_amount" else refund.amount
    book(
        ("refund", "refund"),
        source=refund.provider_id,
        amount=-amount,
        currency=refund.currency,
        at=refund.created_at,
    )


def book_refund_failure(refund: ProviderRefund) -> None:
    """The money of a refund that failed after it was made, back in the balance."""
    book(
        ("refund_failure", "refund_failure"),
        source=refund.provider_id,
        amount=refund.amount,
        currency=refund.currency,
    )


def book_dispute(dispute: ProviderDispute, *, withdraw: bool) -> ProviderBalanceTransaction:
    """A dispute's withdrawal (its amount and the dispute fee) or its reinstatement."""
    return book(
        ("adjustment", "dispute" if withdraw else "dispute_reversal"),
        source=dispute.provider_id,
        amount=-dispute.amount if withdraw else dispute.amount,
        currency=dispute.currency,
        fee=DISPUTE_FEE if withdraw else 0,
    )


def stray_adjustment(*, amount: int, currency: str) -> ProviderBalanceTransaction:
    """A movement of the provider's own that nothing else knows of (a planted fault)."""
    return book(("adjustment", "other_adjustment"), source="", amount=amount, currency=currency)


def pay_out(today: date | None = None) -> list[ProviderPayout]:
    """Today's payouts, if not made yet: per currency, every balance transaction available
    by today and not paid out, with the payout's own balance transaction."""
    today = today or timezone.now().astimezone(UTC).date()
    made = []
    with transaction.atomic():
        due = ProviderBalanceTransaction.objects.select_for_update().filter(
            available_on__lte=today, payout__isnull=True
        )
        due = due.exclude(type="payout")
        for currency in sorted(set(due.values_list("currency", flat=True))):
            these = due.filter(currency=currency)
            total = these.aggregate(total=Sum("net"))["total"] or 0
            payout = ProviderPayout.objects.create(
                provider_id="po_sim_" + secrets.token_hex(12),
                amount=total,
                currency=currency,
                arrival_date=today,
            )
            ids = list(these.values_list("pk", flat=True))
            ProviderBalanceTransaction.objects.filter(pk__in=ids).update(payout=payout)
            paid = book(
                ("payout", "payout"),
                source=payout.provider_id,
                amount=-total,
                currency=currency,
                at=payout.created_at,
            )
            ProviderBalanceTransaction.objects.filter(pk=paid.pk).update(payout=payout)
            made.append(payout)
    return made
