"""One refund from the command line, through the same service as everything else.

The exit code says how the refund ended, for scripts that run it:

    0  succeeded, or pending (accepted; with REFUND_DISPATCH=worker the worker sends it)
    1  refused: nothing was written (the code and message are on stderr)
    3  failed: the provider declined it; the amount is released
    4  unknown: the provider's outcome is not known; the amount stays reserved

A replay (the same idempotency key again) exits by the replayed refund's status. Codes 3
and 4 are set only when run as a process (manage.py); call_command returns normally and
the status is in the printed line.
"""

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger_app.csv_files import DIGITS
from ledger_app.errors import InvalidAmount, LedgerError
from ledger_app.management.commands._output import UNSETTLED, ExitsByOutcome, cli_actor
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund


class Command(ExitsByOutcome):
    help = (
        "Refund a charge. Prints the refund (id, amount, status) or the refusal's code. "
        "Exit 0 when it succeeded or is pending (queued for the worker), 1 when refused "
        "(nothing written), 3 when it failed (the provider declined; the amount is "
        "released), 4 when its outcome is unknown (the amount stays reserved until "
        "`manage.py reconcile` settles it). A replay exits by the replayed refund's status."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("charge_id")
        parser.add_argument(
            "--amount", help="Minor units (1234 for $12.34). Omitted: all that is left."
        )
        parser.add_argument("--reason", default="", help=", ".join(Refund.Reason.values))
        parser.add_argument(
            "--idempotency-key", help="Running again with the same key replays, never repeats."
        )
        parser.add_argument("--note", default="")

    def handle(
        self,
        *args: Any,
        charge_id: str,
        amount: str | None,
        reason: str,
        idempotency_key: str | None,
        note: str,
        **options: Any,
    ) -> None:
        try:
            if amount is not None and not DIGITS.match(amount):
                raise InvalidAmount(f"{amount[:30]!r} is not a whole number of minor units.")
            result = create_refund(
                RefundRequest(
                    charge_id=charge_id,
                    amount=None if amount is None else int(amount),
                    idempotency_key=idempotency_key,
                    reason=reason,
                    note=note,
                    actor=cli_actor(),
                    source=Refund.Source.CLI,
                )
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}", returncode=1) from exc
        refund = result.item
        replayed = " (replayed)" if result.replayed else ""
        detail = f" ({refund.status_detail})" if refund.status_detail else ""
        self.stdout.write(
            f"{refund.id} {refund.amount} {refund.currency} {refund.status}{detail}{replayed}"
        )
        if refund.status in UNSETTLED:
            self.report_unsettled(refund.status, f"refund {refund.id}")
