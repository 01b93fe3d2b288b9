"""Remove what has expired: events and their deliveries, provider events, idempotency keys,
rate counters, sign-in records, the simulated provider's request log."""

from argparse import ArgumentParser
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ledger_app.operations.retention import (
    BATCH_SIZE,
    PAUSE,
    Pace,
    Purged,
    PurgeResult,
    purge_expired,
)


class Command(BaseCommand):
    help = (
        "Delete what has expired, each kind in short batches (select by an index, delete, "
        "commit): events and their webhook deliveries (EVENT_RETENTION_DAYS), provider events "
        "(PROVIDER_EVENT_RETENTION_DAYS), idempotency keys of final refunds and charges "
        "(IDEMPOTENCY_KEY_RETENTION_DAYS), rate counters of ended windows, admin sign-in "
        "records (LOGIN_RECORD_RETENTION_DAYS), the simulated provider's request log "
        "(SIMULATED_PROVIDER_LOG_DAYS). Charges, refunds, ledger entries and the admin log are "
        "never deleted, nor anything a refund in doubt or awaiting approval needs. One run at "
        "a time: another process running it says so and exits 0. The refund worker "
        "(process_refunds --loop) runs it once a day. See docs/operating/retention.md."
    )
    prefix = "purge_expired"

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH_SIZE,
            metavar="ROWS",
            help=f"Rows per batch, each in its own short transaction (default {BATCH_SIZE}).",
        )
        parser.add_argument(
            "--pause",
            type=float,
            default=PAUSE,
            metavar="RATIO",
            help="After each batch, wait RATIO times as long as it took, so refunds' commits "
            f"do not queue behind the purge's writes (default {PAUSE:g}; 0: no pause).",
        )

    def handle(
        self, *args: Any, dry_run: bool, batch_size: int, pause: float, **options: Any
    ) -> None:
        self.check_pace(batch_size, pause)
        result = purge_expired(
            dry_run=dry_run,
            pace=Pace(batch_size=batch_size, pause=pause),
            on_kind=self.say(dry_run),
        )
        self.finish(result)

    def check_pace(self, batch_size: int, pause: float) -> None:
        if not 1 <= batch_size <= 100_000:
            raise CommandError("--batch-size must be 1 to 100000", returncode=2)
        if not 0 <= pause <= 100:  # NaN fails this too
            raise CommandError("--pause must be 0 to 100", returncode=2)

    def say(self, dry_run: bool) -> Callable[[Purged], None]:
        heading = f"{self.prefix} (dry run)" if dry_run else self.prefix

        def line(purged: Purged) -> None:
            self.stdout.write(f"{heading}: {purged.line(dry_run=dry_run)}")

        return line

    def finish(self, result: PurgeResult) -> None:
        if not result.ran:
            held = result.held_by
            until = (
                f" until {held.leased_until:%Y-%m-%d %H:%M:%S} UTC"
                if held and held.leased_until
                else ""
            )
            holder = held.holder if held else "another process"
            self.stdout.write(
                f"{self.prefix}: another run holds the job ({holder}{until}); nothing done"
            )
        elif result.lease_lost:
            raise CommandError(
                "the lease ran out and another process took the job over; this run stopped "
                "(its last batch rolled back)",
                returncode=1,
            )
