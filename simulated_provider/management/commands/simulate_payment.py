"""A customer pays through the merchant's checkout, at the simulated provider."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from simulated_provider import news
from simulated_provider.dashboard import Refused, take_payment


class Command(BaseCommand):
    help = (
        "A payment taken at the simulated provider, as its checkout would: a succeeded charge "
        "of its own, told to the back office by a signed charge.succeeded webhook "
        "(SIMULATED_PROVIDER_WEBHOOK_URL, STRIPE_WEBHOOK_SECRET) unless --no-webhook (the news "
        "is lost: sync_provider finds it). Prints the provider's new charge id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--amount", type=int, required=True, help="Minor units (cents).")
        parser.add_argument("--currency", required=True, help="ISO 4217 code, e.g. usd.")
        parser.add_argument("--description", default="", help="What was bought.")
        parser.add_argument(
            "--no-webhook", action="store_true", help="Tell the back office nothing."
        )
        parser.add_argument(
            "--every",
            type=float,
            help="Take one every SECONDS until stopped (make run's trickle of customers); a "
            "webhook the back office did not take is said on stderr, and the next goes on.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        every = options["every"]
        if every is not None and not every > 0:
            raise CommandError("simulate_payment: --every must be a number of seconds above 0")
        while True:
            self._one(options)
            if every is None:
                return
            time.sleep(every)

    def _one(self, options: dict[str, Any]) -> None:
        try:
            charge = take_payment(
                amount=options["amount"],
                currency=options["currency"],
                description=options["description"][:500],
            )
        except Refused as exc:
            raise CommandError(f"simulate_payment: {exc}") from exc
        self.stdout.write(charge.provider_id)
        if options["no_webhook"]:
            return
        try:
            tell(self, news.event_about(charge, "charge.succeeded"), "simulate_payment")
        except CommandError as exc:
            if options["every"] is None:
                raise
            self.stderr.write(str(exc))  # the server is not up yet, say: the sync finds it


def tell(command: BaseCommand, event: dict, name: str) -> None:
    """Send the news; what the back office answered, on stderr (stdout is the new id)."""
    try:
        [outcome] = news.send([event])
    except (OSError, RuntimeError) as exc:
        raise CommandError(f"{name}: made, but the news was not sent: {exc}") from exc
    command.stderr.write(f"{event['type']} {event['data']['object']['id']}: {outcome}")
