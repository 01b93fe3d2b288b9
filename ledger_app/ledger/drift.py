"""The books checked against themselves: verify_ledger's reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BigIntegerField,
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat

from ledger_app.charges.models import Charge
from ledger_app.db import streamed
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.ledger.models import LedgerEntry
from ledger_app.refunds.models import Refund

CHUNK_SIZE = 2000  # rows fetched at a time: memory stays flat however large the tables


@dataclass(frozen=True)
class Drift:
    """One way the books disagree with themselves."""

    object_id: str
    problem: str
    detail: str

    def __str__(self) -> str:
        return f"{self.object_id}: {self.problem}: {self.detail}"


def _sum_per_charge(queryset: QuerySet[Any], field: str) -> Coalesce:
    total = (
        queryset.filter(charge=OuterRef("pk"))
        .order_by()
        .values("charge")
        .annotate(total=Sum(field))
        .values("total")
    )
    return Coalesce(
        Subquery(total, output_field=BigIntegerField()),
        Value(0),
        output_field=BigIntegerField(),
    )


def find_ledger_drift() -> Iterator[Drift]:
    """Yield every place where stored totals, refunds and ledger entries disagree.

    Checks, in this order: each charge's amount_refunded equals the sum of its live
    refunds and the sum of its ledger deltas and lies within [0, amount]; each refund has
    the charge's currency and its own provider key (refund:<id>); each succeeded refund
    has its settlement entry; each key's refund is the one its request asked for; each
    refund is bound by at most one idempotency key; no charge disagrees with the provider
    (refunds it made that the ledger had no room for, held: ledger_app/mirror/adoption.py);
    no charge's dispute reinstated more than it withdrew, or withdrew more than the charge.
    Streams with iterators, so memory does not grow with the table; each check's query
    runs only when the one before it is exhausted.
    """
    yield from _balance_drift()
    yield from _currency_mismatch()
    yield from _provider_key_changed()
    yield from _unsettled_success()
    yield from _key_does_not_match_refund()
    yield from _refund_bound_by_several_keys()
    yield from _disagrees_with_provider()
    yield from _dispute_money_drift()


def _balance_drift() -> Iterator[Drift]:
    """Charges whose amount_refunded disagrees with their live refunds or their ledger
    deltas, or lies outside [0, amount]."""
    live = Refund.objects.filter(status__in=Refund.LIVE_STATUSES)
    charges = (
        Charge.objects.annotate(
            live_refunds=_sum_per_charge(live, "amount"),
            booked=_sum_per_charge(LedgerEntry.objects.all(), "refunded_delta"),
        )
        .filter(
            ~Q(amount_refunded=F("live_refunds"))
            | ~Q(amount_refunded=F("booked"))
            | Q(amount_refunded__gt=F("amount"))
            | Q(amount_refunded__lt=0)
        )
        .order_by("pk")
        .values_list("pk", "amount", "amount_refunded", "live_refunds", "booked")
    )
    for pk, amount, refunded, live_total, booked in streamed(charges, CHUNK_SIZE):
        yield Drift(
            pk,
            "amount_refunded_drift",
            f"amount={amount} amount_refunded={refunded} live_refunds={live_total} ledger={booked}",
        )


def _currency_mismatch() -> Iterator[Drift]:
    """Refunds in another currency than their charge."""
    mismatched = (
        Refund.objects.exclude(currency=F("charge__currency"))
        .order_by("pk")
        .values_list("pk", "currency", "charge__currency")
    )
    for pk, currency, charge_currency in streamed(mismatched, CHUNK_SIZE):
        yield Drift(pk, "currency_mismatch", f"refund {currency} on a {charge_currency} charge")


def _provider_key_changed() -> Iterator[Drift]:
    """Refunds whose provider idempotency key is not refund:<their id> (or, for one made
    at the provider, provider:<its provider id>)."""
    ours = Q(provider_idempotency_key=Concat(Value("refund:"), F("id")))
    adopted = Q(
        source=Refund.Source.PROVIDER,
        provider_idempotency_key=Concat(Value("provider:"), F("provider_refund_id")),
    )
    wrong_key = (
        Refund.objects.exclude(ours | adopted)
        .order_by("pk")
        .values_list("pk", "provider_idempotency_key")
    )
    for pk, key in streamed(wrong_key, CHUNK_SIZE):
        yield Drift(pk, "provider_key_changed", f"provider key is {key!r}")


def _unsettled_success() -> Iterator[Drift]:
    """Succeeded refunds with no refund_succeeded ledger entry."""
    settlement = LedgerEntry.objects.filter(
        refund=OuterRef("pk"), kind=LedgerEntry.Kind.REFUND_SUCCEEDED
    )
    unsettled = (
        Refund.objects.filter(status=Refund.Status.SUCCEEDED)
        .exclude(Exists(settlement))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for pk in streamed(unsettled, CHUNK_SIZE):
        yield Drift(pk, "settlement_not_in_ledger", "succeeded with no refund_succeeded entry")


def _key_does_not_match_refund() -> Iterator[Drift]:
    """Refund keys bound to a refund of another charge (or PaymentIntent) or another
    amount than their request asked for."""
    refund_keys = IdempotencyRecord.objects.filter(
        operation=IdempotencyRecord.Operation.REFUND_CREATE
    )
    keyed = refund_keys.annotate(
        sent_charge=KT("request_params__charge"),
        sent_amount=KT("request_params__amount"),
        sent_intent=KT("request_params__payment_intent"),
    )
    mismatched_keys = (
        # None: JSON null, a request that named the charge by its PaymentIntent alone
        keyed.exclude(request_params__charge=None).exclude(sent_charge=F("refund__charge_id"))
        | keyed.filter(request_params__has_key="payment_intent").exclude(
            sent_intent=F("refund__charge__payment_intent")
        )
        | keyed.filter(request_params__charge=None).exclude(  # named no charge at all
            request_params__has_key="payment_intent"
        )
        | keyed.exclude(request_params__amount=None).exclude(  # None: JSON null, omitted
            refund__amount=Cast("sent_amount", BigIntegerField())
        )
    ).order_by("pk")
    rows = mismatched_keys.values_list("key", "refund_id")
    for key, refund_id in streamed(rows, CHUNK_SIZE):
        yield Drift(refund_id, "key_does_not_match_refund", f"key {key!r} asked for another refund")


def _refund_bound_by_several_keys() -> Iterator[Drift]:
    """Refunds that more than one idempotency key points to."""
    doubly_keyed = (
        # Keys of charge.create requests have no refund: NULL is not one refund.
        IdempotencyRecord.objects.filter(refund__isnull=False)
        .order_by()
        .values("refund")
        .annotate(keys=Count("pk"))
        .filter(keys__gt=1)
        .values_list("refund", "keys")
    )
    for refund_id, keys in streamed(doubly_keyed, CHUNK_SIZE):
        yield Drift(refund_id, "refund_bound_by_several_keys", f"{keys} idempotency keys")


def _disagrees_with_provider() -> Iterator[Drift]:
    """Charges holding refunds the provider made that the ledger had no room for."""
    disagreeing = (
        Charge.objects.filter(provider_disagreement__has_key="held")
        .order_by("pk")
        .values_list("pk", "provider_disagreement")
    )
    for pk, disagreement in streamed(disagreeing, CHUNK_SIZE):
        said = disagreement or {}
        held = ", ".join(f"{item['id']} ({item['amount']})" for item in said.get("held", []))
        yield Drift(pk, "disagrees_with_provider", f"{said.get('why')}; held: {held or 'none'}")


def _dispute_money_drift() -> Iterator[Drift]:
    """Charges whose dispute entries reinstate more than they withdrew, or withdraw more
    than the charge's amount."""
    disputed = LedgerEntry.objects.filter(kind__startswith="dispute_")
    charges = (
        Charge.objects.filter(pk__in=disputed.values("charge"))
        .annotate(
            withdrawn=_sum_per_charge(
                disputed.filter(kind=LedgerEntry.Kind.DISPUTE_WITHDRAWN), "amount"
            ),
            reinstated=_sum_per_charge(
                disputed.filter(kind=LedgerEntry.Kind.DISPUTE_REINSTATED), "amount"
            ),
        )
        .filter(Q(reinstated__gt=F("withdrawn")) | Q(withdrawn__gt=F("amount")))
        .order_by("pk")
        .values_list("pk", "amount", "withdrawn", "reinstated")
    )
    for pk, amount, withdrawn, reinstated in streamed(charges, CHUNK_SIZE):
        yield Drift(
            pk,
            "dispute_money_drift",
            f"amount={amount} withdrawn={withdrawn} reinstated={reinstated}",
        )


def count_entries() -> dict[str, int]:
    """How many ledger entries of each kind there are, in the kinds' order."""
    counted = dict(
        LedgerEntry.objects.order_by()
        .values_list("kind")
        .annotate(n=Count("pk"))
        .values_list("kind", "n")
    )
    return {kind: counted[kind] for kind in LedgerEntry.Kind.values if counted.get(kind)}
