"""Someone refunds part of a charge in the simulated provider's own dashboard."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from simulated_provider import news
from simulated_provider.dashboard import Refused, refund_from_dashboard
from simulated_provider.management.commands.simulate_payment import tell


class Command(BaseCommand):
    help = (
        "A refund made in the simulated provider's own dashboard, outside the back office: at "
        "most what its books have left of the charge (CHARGE: the provider's charge id). Told "
        "by a signed refund.created webhook unless --no-webhook (sync_provider finds it). "
        "Prints the provider's new refund id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("charge", help="The provider's charge id (ch_...).")
        parser.add_argument("--amount", type=int, required=True, help="Minor units (cents).")
        parser.add_argument(
            "--no-webhook", action="store_true", help="Tell the back office nothing."
        )

    def handle(
        self, *args: Any, charge: str, amount: int, no_webhook: bool, **options: Any
    ) -> None:
        try:
            refund = refund_from_dashboard(charge_id=charge, amount=amount)
        except Refused as exc:
            raise CommandError(f"simulate_provider_refund: {exc}") from exc
        self.stdout.write(refund.provider_id)
        if not no_webhook:
            tell(self, news.event_about(refund, "refund.created"), "simulate_provider_refund")
