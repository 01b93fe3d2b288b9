"""The ledger invariants, checked against the database after a test."""

from django.db.models import Count, F

from ledger_app.ledger.drift import find_ledger_drift
from ledger_app.models import Charge, Event, IdempotencyRecord, LedgerEntry, Refund
from simulated_provider.models import ProviderRequest


def assert_ledger_invariants(allowed_drift: frozenset[str] = frozenset()) -> None:
    """Never over-refunded; amount_refunded equals live refunds and the ledger; one refund
    per key and every keyed refund matches the request that bound it; one provider key per
    refund, minted from its own id."""
    drift = [str(d) for d in find_ledger_drift() if d.problem not in allowed_drift]
    assert drift == [], f"ledger drift: {drift}"

    over = Charge.objects.filter(amount_refunded__gt=F("amount"))
    assert not over.exists(), f"over-refunded charges: {list(over.values_list('pk', flat=True))}"

    for record in IdempotencyRecord.objects.select_related("refund", "charge"):
        params = record.request_params
        if record.operation == "refund.create":
            refund = record.refund
            assert refund is not None, record.key
            if params["charge"] is not None or "payment_intent" not in params:
                assert refund.charge_id == params["charge"], record.key
            if "payment_intent" in params:  # a refund named by its charge's PaymentIntent
                assert refund.charge.payment_intent == params["payment_intent"]
            if params["amount"] is not None:
                assert refund.amount == params["amount"], record.key
        else:
            assert record.charge is not None, record.key
            assert record.charge.amount == params["amount"], record.key

    duplicates = (
        Refund.objects.values("provider_idempotency_key").annotate(n=Count("pk")).filter(n__gt=1)
    )
    assert not duplicates.exists(), f"provider keys shared: {list(duplicates)}"
    minted = Refund.objects.values_list(
        "pk", "source", "provider_refund_id", "provider_idempotency_key"
    )
    for refund_id, source, provider_id, provider_key in minted:
        made_there = source == Refund.Source.PROVIDER  # adopted: its key names the provider's id
        assert provider_key == (f"provider:{provider_id}" if made_there else f"refund:{refund_id}")


def assert_provider_agrees() -> None:
    """One provider refund per ledger refund, and settled refunds say what the provider said.

    For runs where every settlement came from the simulated provider.
    """
    from simulated_provider.models import ProviderRefund

    ledger = {r.provider_idempotency_key: r for r in Refund.objects.all()}
    provider = list(ProviderRefund.objects.all())
    assert len({p.idempotency_key for p in provider}) == len(provider)
    strays = [p.idempotency_key for p in provider if p.idempotency_key not in ledger]
    assert strays == [], f"provider refunds with no ledger refund: {strays}"
    by_key = {p.idempotency_key: p for p in provider}
    for key, refund in ledger.items():
        answer = by_key.get(key)
        if refund.status == "succeeded":
            # `failed`: the provider failed it later and its news has not reached us yet
            assert answer is not None and answer.status in ("succeeded", "failed"), key
            assert (answer.amount, answer.currency) == (refund.amount, refund.currency), key
        elif refund.status == "failed":
            assert answer is None or answer.status in ("declined", "failed"), key


def books(charge: Charge) -> tuple:
    """Everything a refund could write, to compare before and after a refusal."""
    from ledger_app.models import LedgerEntry

    charge.refresh_from_db()
    return (
        charge.amount_refunded,
        Refund.objects.count(),
        LedgerEntry.objects.count(),
        IdempotencyRecord.objects.count(),
    )


def rows_written() -> tuple[int, ...]:
    """How many rows every table a refusal must leave alone holds: charges, refunds, ledger
    entries, idempotency keys, events and provider requests. Equal before and after means
    nothing was written."""
    return (
        Charge.objects.count(),
        Refund.objects.count(),
        LedgerEntry.objects.count(),
        IdempotencyRecord.objects.count(),
        Event.objects.count(),
        ProviderRequest.objects.count(),
    )
