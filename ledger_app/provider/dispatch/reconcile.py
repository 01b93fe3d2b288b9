"""The reconciler: asks the provider about every refund and charge in doubt, through the
guarded send (`ask_first`): its record settles the item; no record means it never
applied, so it is sent again with its same key; no answer leaves it as it is."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError

from ledger_app.charges.models import Charge
from ledger_app.provider.dispatch.send import (
    Gateway,
    Movement,
    Sent,
    recheck_refund,
    send_charge,
    send_refund,
)
from ledger_app.provider.selectors import in_doubt_ids
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import recently_succeeded
from ledger_app.worker_parts import RunOutcomes


def reconcile_refund(
    refund_id: str,
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent[Refund]:
    """Ask about one refund in doubt. One another sender holds, or a settled one, is
    left alone."""
    return send_refund(
        refund_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds, actor=actor
    )


def reconcile_charge(
    charge_id: str, *, gateway: Gateway | None = None, lease_seconds: int | None = None
) -> Sent[Charge]:
    """Like reconcile_refund, for a charge created here."""
    return send_charge(charge_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds)


def reconcile_refunds(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> RunOutcomes:
    """reconcile_refund for every unknown refund and every pending one nobody is sending."""
    return _reconcile_all(Refund, reconcile_refund, gateway, lease_seconds, on_refund)


def reconcile_charges(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_charge: Callable[[Charge], None] = lambda charge: None,
) -> RunOutcomes:
    """reconcile_charge for every charge in doubt."""
    return _reconcile_all(Charge, reconcile_charge, gateway, lease_seconds, on_charge)


def _reconcile_all(
    model: type[Movement],
    reconcile_one: Callable[..., Sent[Movement]],
    gateway: Gateway | None,
    lease_seconds: int | None,
    on_item: Callable[[Movement], None],
) -> RunOutcomes:
    tally = RunOutcomes()
    tally.send_each(
        in_doubt_ids(model, lease_seconds),
        lambda pk: reconcile_one(pk, gateway=gateway, lease_seconds=lease_seconds),
        on_item,
        model._meta.model_name or model.__name__,
    )
    return tally


def recheck_succeeded_refunds(
    *,
    gateway: Gateway | None = None,
    hours: int | None = None,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> RunOutcomes:
    """recheck_refund for every refund that succeeded within RECONCILE_RECHECK_HOURS: the
    backstop for a missed `refund.failed` webhook. Counts only those it moved."""
    hours = settings.RECONCILE_RECHECK_HOURS if hours is None else hours
    tally = RunOutcomes()
    for pk in recently_succeeded(hours) if hours > 0 else []:
        try:
            refund = recheck_refund(pk, gateway=gateway)
        except DatabaseError:
            tally.survive_database_error(f"refund {pk}")
            continue
        if refund.status != Refund.Status.SUCCEEDED:
            tally.add(refund.status)
            on_refund(refund)
    return tally
