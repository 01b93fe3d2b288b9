"""Asks the simulated provider to open, move or close a dispute of a charge, which tells
the back office as Stripe does (a signed charge.dispute.* webhook). A demo's tool: it lives
here because the simulated provider reads nothing of the back office's."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.charges.models import DISPUTE_STATUSES, Charge
from simulated_provider import news


class Command(BaseCommand):
    help = (
        "Dispute a charge at the simulated provider (default status needs_response: open), "
        "or move its dispute on (under_review) or close it (won, lost, warning_closed). "
        "The news goes to SIMULATED_PROVIDER_WEBHOOK_URL, signed with STRIPE_WEBHOOK_SECRET."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("charge", help="The charge's id (ch_...).")
        parser.add_argument("--status", choices=sorted(DISPUTE_STATUSES), default="needs_response")

    def handle(self, *args: Any, charge: str, status: str, **options: Any) -> None:
        found = Charge.objects.filter(pk=charge).first()
        if found is None:
            raise CommandError(f"simulate_dispute: no such charge {charge[:64]!r}")
        events = news.dispute_news(
            charge_reference=found.provider_reference,
            amount=found.amount,
            currency=found.currency,
            status=status,
        )
        try:
            outcomes = news.send(events)
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"simulate_dispute: news not sent: {exc}") from exc
        for event, outcome in zip(events, outcomes, strict=True):
            self.stdout.write(f"{event['type']} {event['data']['object']['id']}: {outcome}")
