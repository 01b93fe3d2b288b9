"""Ask the provider about refunds and charges whose outcome the ledger does not know."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.approvals.services import expire_approvals
from ledger_app.provider.dispatch import (
    recheck_succeeded_refunds,
    reconcile_charges,
    reconcile_refunds,
)

if TYPE_CHECKING:
    from ledger_app.charges.models import Charge
    from ledger_app.refunds.models import Refund


class Command(BaseCommand):
    help = (
        "Settle every unknown refund and charge, and every pending one whose dispatch is "
        "stale, by asking the provider. What the provider has no record of is sent again "
        "with its same key; what it cannot answer stays as it is. Then ask again about "
        "refunds that succeeded within RECONCILE_RECHECK_HOURS: one the provider now says "
        "failed moves to failed and its amount is released; one it now gives a card "
        "reference (ARN) for records it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--lease-seconds",
            type=int,
            default=None,
            help="Pending longer than this is stale (default REFUND_DISPATCH_LEASE_SECONDS).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        lease = options["lease_seconds"]
        if lease is not None and not 0 <= lease <= 604_800:
            raise CommandError("--lease-seconds must be 0 to 604800 (a week)", returncode=2)
        refunds = reconcile_refunds(lease_seconds=lease, on_refund=self._line("refund"))
        charges = reconcile_charges(lease_seconds=lease, on_charge=self._line("charge"))
        rechecked = recheck_succeeded_refunds(on_refund=self._line("refund"))
        expired = expire_approvals()
        for refund_id in expired:
            self.stdout.write(f"refund {refund_id} canceled (not approved in time)")
        self.stdout.write(
            f"reconcile: refunds: {refunds.summary()}; charges: {charges.summary()}; "
            f"succeeded refunds now failed: {sum(rechecked.statuses.values())}; "
            f"approvals expired: {len(expired)}"
        )
        if refunds.errors or charges.errors or rechecked.errors:
            raise CommandError("some were interrupted by database errors", returncode=1)

    def _line(self, kind: str) -> Callable[[Refund | Charge], None]:
        def write(obj: Refund | Charge) -> None:
            detail = f" ({obj.status_detail})" if obj.status_detail else ""
            self.stdout.write(f"{kind} {obj.id} {obj.status}{detail}")

        return write
