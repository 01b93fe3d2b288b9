"""The webhook worker: sends pending webhook deliveries to their endpoints, at least once.

Exit 0 when it ran, whatever the receivers answered (a receiver failing is retried later,
not the command failing); 1 on a CommandError: bad arguments, or (with --once) database
errors that interrupted some deliveries (they are sent again once their lease runs out).
With --loop, SIGTERM or SIGINT: the delivery in hand is finished, the rest of its batch
handed back, exit 0; 128 + the signal if that takes more than --stop-seconds or a second
signal comes (see docs/operating/deploys.md).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from ledger_app.access.time_zones import shown_time
from ledger_app.events.delivery import REFUSED, Attempt, deliver_due
from ledger_app.management.commands._polling import PollingWorker
from ledger_app.worker_parts import ItemsInHand

MAX_LEASE_SECONDS = 86_400
MAX_THREADS = 64


class Command(PollingWorker):
    noun = "delivery"
    plural = "deliveries"
    left_in_hand = (
        "it is sent again when its lease runs out (WEBHOOK_LEASE_SECONDS); receivers "
        "drop the repeat by event id"
    )
    hand_type = ItemsInHand  # one delivery in hand per lane
    batch_default = 10
    poll_default = 1.0
    lease_help = (
        "How long a claim holds (default WEBHOOK_LEASE_SECONDS); at least "
        "WEBHOOK_TIMEOUT_SECONDS + WEBHOOK_LEASE_MARGIN_SECONDS (1 s)."
    )
    help = (
        "Send pending webhook deliveries, signed with each endpoint's secret (Stripe-Signature). "
        "Deliveries are claimed in batches with a lease (SKIP LOCKED on PostgreSQL), so any "
        "number of workers can run side by side, each with --threads lanes sending at once; "
        "a delivery whose worker died is sent again "
        "after its lease. Errors, non-2xx answers, timeouts and refused URLs (private "
        "addresses unless WEBHOOK_ALLOW_PRIVATE_URLS=true) are retried with exponential "
        "backoff until the delivery is WEBHOOK_RETRY_HOURS old, then it is marked failed. "
        "Exit 0 whatever the receivers answered; 1 on bad arguments or database errors."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help=(
                "Deliveries in flight at most (default WEBHOOK_DELIVERY_THREADS): lanes that "
                "each claim batches of their own, with a database connection each; more "
                "start only while a claim comes back full. PostgreSQL only; SQLite runs one."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._check(options)
        total = self.run_passes(
            options, deliver_due, threads=options["threads"], on_attempt=self._log_attempt
        )
        self.stdout.write(f"deliver_webhooks: {total.summary()}")
        if total.errors and not options["loop"]:  # a loop ends only when asked to: exit 0
            raise CommandError("some deliveries were interrupted; they will be sent again")

    def _check(self, options: dict[str, Any]) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        lease = options["lease_seconds"]
        least = settings.WEBHOOK_TIMEOUT_SECONDS + settings.WEBHOOK_LEASE_MARGIN_SECONDS
        if lease is not None and not least <= lease <= MAX_LEASE_SECONDS:
            raise CommandError(
                f"--lease-seconds must be more than WEBHOOK_TIMEOUT_SECONDS "
                f"({settings.WEBHOOK_TIMEOUT_SECONDS:g}) by at least "
                f"{settings.WEBHOOK_LEASE_MARGIN_SECONDS:g} s, and at most {MAX_LEASE_SECONDS}"
            )
        if options["poll_seconds"] < 0:
            raise CommandError("--poll-seconds must not be negative")
        threads = options["threads"]
        if threads is not None and not 1 <= threads <= MAX_THREADS:
            raise CommandError(f"--threads must be from 1 to {MAX_THREADS}")

    def still_leased(self, pk: str | int) -> bool:
        return False  # recording an attempt always ends this worker's lease on it

    def _log_attempt(self, attempt: Attempt) -> None:
        delivery = attempt.delivery
        error = attempt.error
        answer = f"HTTP {attempt.status_code}" if attempt.status_code else "no answer"
        if error.startswith(REFUSED):
            answer = "not sent"
            if attempt.outcome == "refused":  # the outcome says it already
                error = error.removeprefix(REFUSED)
        line = (
            f"{delivery.event_id} {delivery.event.type} -> {delivery.endpoint_id} "
            f"{attempt.outcome} ({answer}) attempt {delivery.attempts + 1}"
        )
        if error and not error.startswith("HTTP "):
            line += f": {error[:200]}"
        if attempt.next_attempt_at and attempt.outcome in ("retrying", "refused"):
            line += f"; next at {shown_time(attempt.next_attempt_at)}"
        self.stdout.write(line)
