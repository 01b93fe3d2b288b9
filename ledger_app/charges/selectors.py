"""Reads of charges: for update under a row lock, by PaymentIntent, and each
charge's state (its newest ledger entry) for the admin's stale-form check."""

from __future__ import annotations

from django.db import connection
from django.db.models import (
    Case,
    Max,
    Q,
    QuerySet,
    When,
)
from django.db.transaction import TransactionManagementError

from ledger_app.charges.models import Charge
from ledger_app.compiled import precompiled
from ledger_app.ledger.models import LedgerEntry


@precompiled
def _charge(pk: str) -> QuerySet[Charge]:
    return Charge.objects.filter(pk=pk).order_by()


def latest_charge_first(charges: QuerySet[Charge]) -> QuerySet[Charge]:
    """The rule for a PaymentIntent's latest charge, the one a refund of it refunds: its
    succeeded charge, else its newest (which the refund's checks then refuse)."""
    return charges.order_by(
        Case(When(status=Charge.Status.SUCCEEDED, then=0), default=1), "-created_at"
    )


def charge_of_payment_intent(payment_intent: str, using: str = "default") -> str | None:
    """The id of a PaymentIntent's latest charge (latest_charge_first); None when it has
    no charge here."""
    charges = Charge.objects.using(using).filter(payment_intent=payment_intent)
    return latest_charge_first(charges).values_list("pk", flat=True).first()


def latest_charges_of(payment_intents: set[str], using: str = "default") -> dict[str, Charge]:
    """Each PaymentIntent's latest charge (latest_charge_first), in one query for them
    all; a PaymentIntent with no charge here is left out."""
    latest: dict[str, Charge] = {}
    charges = Charge.objects.using(using).filter(payment_intent__in=payment_intents)
    for charge in latest_charge_first(charges):
        latest.setdefault(charge.payment_intent, charge)
    return latest


def charges_for_update() -> QuerySet[Charge]:
    """Charges to lock. Lock order everywhere: the idempotency key, then charges in
    primary-key order, then a charge's refunds."""
    return Charge.objects.order_by("pk").select_for_update(of=("self",))


def charge_for_update(pk: str) -> Charge | None:
    """One charge, locked for the rest of the caller's transaction (None: no such
    charge): charges_for_update().filter(pk=pk).first(), precompiled, as every settle
    takes this lock."""
    if connection.get_autocommit():
        raise TransactionManagementError("a charge is locked inside a transaction")
    found = _charge_for_update(pk)
    return found[0] if found else None


@precompiled
def _charge_for_update(pk: str) -> QuerySet[Charge]:
    return charges_for_update().filter(pk=pk)


def charge_state(charge_id: str) -> int:
    """A number that changes whenever the charge's books do: the id of its newest ledger
    entry (entries are append-only, one for every money-moving moment), 0 when none."""
    return charge_states([charge_id])[charge_id]


def charge_states(charge_ids: list[str]) -> dict[str, int]:
    """charge_state for many charges in one query."""
    newest = (
        LedgerEntry.objects.filter(charge_id__in=charge_ids)
        .order_by()
        .values("charge_id")
        .annotate(newest=Max("id"))
        .values_list("charge_id", "newest")
    )
    return {pk: 0 for pk in charge_ids} | dict(newest)


def known_to_the_provider_as(reference: str) -> Q:
    """The charge the provider knows by `reference` (Charge.provider_reference, read the
    other way): its own id for a charge it answered for; the charge's id for one that
    arrived from it, or was imported."""
    return Q(provider_charge_id=reference) | Q(pk=reference, provider_charge_id="")
