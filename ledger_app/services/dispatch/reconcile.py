"""The reconciler: asks the provider about every refund and charge in doubt, through the
guarded send (`ask_first`): its record settles the item; no record means it never
applied, so it is sent again with its same key; no answer leaves it as it is."""

from __future__ import annotations

from collections.abc import Callable

from ledger_app.models import Charge, Refund
from ledger_app.selectors import in_doubt_ids
from ledger_app.services.dispatch.send import Gateway, Sent, send_charge, send_refund
from ledger_app.services.dispatch.worker import Tally


def reconcile_refund(
    refund_id: str,
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    actor: str = "",
) -> Sent:
    """Ask about one refund in doubt. One another sender holds, or a settled one, is
    left alone."""
    return send_refund(
        refund_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds, actor=actor
    )


def reconcile_charge(
    charge_id: str, *, gateway: Gateway | None = None, lease_seconds: int | None = None
) -> Sent:
    """Like reconcile_refund, for a charge created here."""
    return send_charge(charge_id, gateway=gateway, ask_first=True, lease_seconds=lease_seconds)


def reconcile_refunds(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_refund: Callable[[Refund], None] = lambda refund: None,
) -> Tally:
    """reconcile_refund for every unknown refund and every pending one nobody is sending."""
    return _reconcile_all(Refund, reconcile_refund, gateway, lease_seconds, on_refund)


def reconcile_charges(
    *,
    gateway: Gateway | None = None,
    lease_seconds: int | None = None,
    on_charge: Callable[[Charge], None] = lambda charge: None,
) -> Tally:
    """reconcile_charge for every charge in doubt."""
    return _reconcile_all(Charge, reconcile_charge, gateway, lease_seconds, on_charge)


def _reconcile_all(model, reconcile_one, gateway, lease_seconds, on_item) -> Tally:
    tally = Tally()
    tally.send_each(
        in_doubt_ids(model, lease_seconds),
        lambda pk: reconcile_one(pk, gateway=gateway, lease_seconds=lease_seconds),
        on_item,
        model._meta.model_name,
    )
    return tally
