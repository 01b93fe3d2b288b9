"""Sending refunds and charges to the provider, and settling what it answers.

Reserve (create_refund / create_charge, one transaction) -> send (`send.py`: the one
guarded send, no transaction, no lock held, the stored provider key on every attempt)
-> settle (`settle.py`: one transaction, with its ledger entry). A timeout is `unknown`,
never `failed`: only the provider's own "no" releases money. `worker.py` sends what is
pending; `reconcile.py` asks the provider about what is unknown or stale, through the
same guarded send.
"""

from ledger_app.provider.dispatch.reconcile import (
    recheck_succeeded_refunds,
    reconcile_charge,
    reconcile_charges,
    reconcile_refund,
    reconcile_refunds,
)
from ledger_app.provider.dispatch.send import Sent, Step, lease_expiry, send_charge, send_refund
from ledger_app.provider.dispatch.settle import (
    Outcome,
    refund_for_update,
    settle_charge,
    settle_locked_charge,
    settle_locked_refund,
    settle_refund,
)
from ledger_app.provider.dispatch.worker import process_pending_refunds
from ledger_app.worker_parts import RunOutcomes

__all__ = [
    "Outcome",
    "Sent",
    "Step",
    "RunOutcomes",
    "lease_expiry",
    "process_pending_refunds",
    "reconcile_charge",
    "reconcile_charges",
    "reconcile_refund",
    "recheck_succeeded_refunds",
    "reconcile_refunds",
    "refund_for_update",
    "send_charge",
    "send_refund",
    "settle_charge",
    "settle_locked_charge",
    "settle_locked_refund",
    "settle_refund",
]
