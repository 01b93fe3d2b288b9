"""Let the simulated provider finish what it left for later, and send its news."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ledger_app.services.provider_events import apply_provider_event
from simulated_provider import news


class Command(BaseCommand):
    help = (
        "The simulated provider settles what it left for later (simulate_refund="
        "pending_then_succeed succeeds; succeed_then_fail fails, as a refund to a closed "
        "card does) and sends each change as a Stripe-shaped event through the same path "
        "as the provider's webhooks (POST /webhooks/stripe): the ledger settles it, and a "
        "refund that succeeded and then failed has its amount released."
    )

    def handle(self, *args, **options):
        events = news.advance()
        for event in events:
            outcome = apply_provider_event(event)
            self.stdout.write(f"{event['type']} {event['data']['object']['id']}: {outcome}")
        self.stdout.write(f"advance_simulated_provider: {len(events)} events sent")
