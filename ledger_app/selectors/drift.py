"""The books checked against themselves: verify_ledger's reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import BigIntegerField, Count, Exists, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat

from ledger_app.models import Charge, IdempotencyRecord, LedgerEntry, Refund


@dataclass(frozen=True)
class Drift:
    """One way the books disagree with themselves."""

    object_id: str
    problem: str
    detail: str

    def __str__(self) -> str:
        return f"{self.object_id}: {self.problem}: {self.detail}"


def _sum_per_charge(queryset, field: str) -> Coalesce:
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

    Checks: each charge's amount_refunded equals the sum of its live refunds and the sum
    of its ledger deltas and lies within [0, amount]; each refund has the charge's
    currency and its own provider key (refund:<id>); each succeeded refund has its
    settlement entry; each key's refund is the one its request asked for; each refund is
    bound by at most one idempotency key.
    Streams with iterators, so memory does not grow with the table.
    """
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
    for pk, amount, refunded, live_total, booked in charges.iterator(chunk_size=2000):
        yield Drift(
            pk,
            "amount_refunded_drift",
            f"amount={amount} amount_refunded={refunded} live_refunds={live_total} ledger={booked}",
        )

    mismatched = (
        Refund.objects.exclude(currency=F("charge__currency"))
        .order_by("pk")
        .values_list("pk", "currency", "charge__currency")
    )
    for pk, currency, charge_currency in mismatched.iterator(chunk_size=2000):
        yield Drift(pk, "currency_mismatch", f"refund {currency} on a {charge_currency} charge")

    wrong_key = (
        Refund.objects.exclude(provider_idempotency_key=Concat(Value("refund:"), F("id")))
        .order_by("pk")
        .values_list("pk", "provider_idempotency_key")
    )
    for pk, key in wrong_key.iterator(chunk_size=2000):
        yield Drift(pk, "provider_key_changed", f"provider key is {key!r}")

    unsettled = (
        Refund.objects.filter(status=Refund.Status.SUCCEEDED)
        .exclude(
            Exists(
                LedgerEntry.objects.filter(
                    refund=OuterRef("pk"), kind=LedgerEntry.Kind.REFUND_SUCCEEDED
                )
            )
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for pk in unsettled.iterator(chunk_size=2000):
        yield Drift(pk, "settlement_not_in_ledger", "succeeded with no refund_succeeded entry")

    refund_keys = IdempotencyRecord.objects.filter(
        operation=IdempotencyRecord.Operation.REFUND_CREATE
    )
    keyed = refund_keys.annotate(
        sent_charge=KT("request_params__charge"), sent_amount=KT("request_params__amount")
    )
    mismatched_keys = (
        keyed.exclude(sent_charge=F("refund__charge_id"))
        | keyed.exclude(request_params__amount=None).exclude(  # None: JSON null, omitted
            refund__amount=Cast("sent_amount", BigIntegerField())
        )
    ).order_by("pk")
    for key, refund_id in mismatched_keys.values_list("key", "refund_id").iterator(chunk_size=2000):
        yield Drift(refund_id, "key_does_not_match_refund", f"key {key!r} asked for another refund")

    doubly_keyed = (
        # Keys of charge.create requests have no refund: NULL is not one refund.
        IdempotencyRecord.objects.filter(refund__isnull=False)
        .order_by()
        .values("refund")
        .annotate(keys=Count("pk"))
        .filter(keys__gt=1)
        .values_list("refund", "keys")
    )
    for refund_id, keys in doubly_keyed.iterator(chunk_size=2000):
        yield Drift(refund_id, "refund_bound_by_several_keys", f"{keys} idempotency keys")
