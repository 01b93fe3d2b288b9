"""One refund from the command line, through the same service as everything else."""

from django.core.management.base import BaseCommand, CommandError

from ledger_app.errors import InvalidAmount, LedgerError
from ledger_app.management.commands._output import cli_actor
from ledger_app.models import Refund
from ledger_app.services.bulk import DIGITS
from ledger_app.services.refunds import create_refund


class Command(BaseCommand):
    help = (
        "Refund a charge. Prints the refund (id, amount, status) or the refusal's code. "
        "Exit 0 when refunded (or replayed), 1 when refused."
    )

    def add_arguments(self, parser):
        parser.add_argument("charge_id")
        parser.add_argument(
            "--amount", help="Minor units (1234 for $12.34). Omitted: all that is left."
        )
        parser.add_argument("--reason", default="", help=", ".join(Refund.Reason.values))
        parser.add_argument(
            "--idempotency-key", help="Running again with the same key replays, never repeats."
        )
        parser.add_argument("--note", default="")

    def handle(self, *args, charge_id, amount, reason, idempotency_key, note, **options):
        try:
            if amount is not None and not DIGITS.match(amount):
                raise InvalidAmount(f"{amount[:30]!r} is not a whole number of minor units.")
            refund = create_refund(
                charge_id=charge_id,
                amount=None if amount is None else int(amount),
                idempotency_key=idempotency_key,
                reason=reason,
                note=note,
                actor=cli_actor(),
                source=Refund.Source.CLI,
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.code}: {exc.message}", returncode=1) from exc
        replayed = " (replayed)" if refund.replayed else ""
        detail = f" ({refund.status_detail})" if refund.status_detail else ""
        self.stdout.write(
            f"{refund.id} {refund.amount} {refund.currency} {refund.status}{detail}{replayed}"
        )
