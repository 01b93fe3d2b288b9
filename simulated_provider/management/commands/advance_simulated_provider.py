"""Let the simulated provider finish what it left for later, and send its news."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from simulated_provider import news


class Command(BaseCommand):
    help = (
        "The simulated provider settles what it left for later (simulate_refund="
        "pending_then_succeed succeeds; succeed_then_fail fails, as a refund to a closed "
        "card does) and sends each change as Stripe does: a signed webhook, POSTed to "
        "SIMULATED_PROVIDER_WEBHOOK_URL (the running server's /webhooks/stripe) with "
        "STRIPE_WEBHOOK_SECRET. The ledger settles it, and a refund that succeeded and then "
        "failed has its amount released."
    )

    def handle(self, *args, **options):
        events = news.advance()
        try:
            outcomes = news.send(events)
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"advance_simulated_provider: news not sent: {exc}") from exc
        for event, outcome in zip(events, outcomes, strict=True):
            self.stdout.write(f"{event['type']} {event['data']['object']['id']}: {outcome}")
        self.stdout.write(f"advance_simulated_provider: {len(events)} events sent")
