"""A customer pays through the merchant's checkout, at the simulated provider."""

from __future__ import annotations

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

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            charge = take_payment(
                amount=options["amount"],
                currency=options["currency"],
                description=options["description"][:500],
            )
        except Refused as exc:
            raise CommandError(f"simulate_payment: {exc}") from exc
        self.stdout.write(charge.provider_id)
        if not options["no_webhook"]:
            tell(self, news.event_about(charge, "charge.succeeded"), "simulate_payment")


def tell(command: BaseCommand, event: dict, name: str) -> None:
    """Send the news; what the back office answered, on stderr (stdout is the new id)."""
    try:
        [outcome] = news.send([event])
    except (OSError, RuntimeError) as exc:
        raise CommandError(f"{name}: made, but the news was not sent: {exc}") from exc
    command.stderr.write(f"{event['type']} {event['data']['object']['id']}: {outcome}")
