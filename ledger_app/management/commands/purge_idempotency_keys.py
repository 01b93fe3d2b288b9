"""Remove old idempotency keys whose outcome is final: `purge_expired`, keys only."""

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from ledger_app.management.commands import purge_expired
from ledger_app.operations.retention import Pace
from ledger_app.operations.retention import purge_expired as purge


class Command(purge_expired.Command):
    help = (
        "Delete idempotency keys older than --older-than DAYS (default "
        "IDEMPOTENCY_KEY_RETENTION_DAYS) whose refund (or charge) is final (succeeded, failed "
        "or canceled). Keys of pending, unknown or awaiting-approval refunds are always kept. "
        "After a key is purged, a request that reuses it is treated as a new request. The "
        "same code as `purge_expired`, for keys only (and under its one-run-at-a-time lease)."
    )
    prefix = "purge_idempotency_keys"

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--older-than", type=int, default=None, metavar="DAYS")

    def handle(
        self,
        *args: Any,
        dry_run: bool,
        batch_size: int,
        pause: float,
        older_than: int | None = None,  # always given by its option: a default for the base's
        **options: Any,
    ) -> None:
        if older_than is None:
            older_than = settings.IDEMPOTENCY_KEY_RETENTION_DAYS
        if not 1 <= older_than <= 36_500:
            raise CommandError("--older-than must be 1 to 36500 days", returncode=2)
        self.check_pace(batch_size, pause)
        result = purge(
            kinds=["idempotency_keys"],
            days={"idempotency_keys": older_than},
            dry_run=dry_run,
            pace=Pace(batch_size=batch_size, pause=pause),
            on_kind=self.say(dry_run),
        )
        self.finish(result)
