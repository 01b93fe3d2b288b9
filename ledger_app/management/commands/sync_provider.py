"""Catch up with the provider: what its webhooks did not tell (ledger_app/mirror/sync.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from ledger_app.mirror.objects import Applied
from ledger_app.mirror.sync import LeaseLost, sync_provider
from ledger_app.provider.dispatch.send import OutcomeUnknown


def _since(text: str) -> datetime:
    """A date (YYYY-MM-DD) or a date and time (ISO 8601), read as UTC unless it says."""
    try:
        since = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"sync_provider: --since {text[:40]!r} is not a date") from None
    return since if since.tzinfo else since.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Walk the provider's charges, refunds and disputes made since the stored cursor (one "
        "PROVIDER_SYNC_INTERVAL of overlap) and apply each as its webhook would: charges "
        "arrive, refunds made at the provider are adopted, statuses settle. A second run "
        "changes nothing; a run killed halfway is finished by the next. One run at a time. "
        "Prints each object that changed something and a summary; exit 1 when the provider "
        "or the database could not answer (run it again), else 0."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            type=_since,
            help="Start here instead of the cursor (YYYY-MM-DD, UTC): a first run's back-fill.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Say what each object would change; write nothing, leave the cursor.",
        )

    def handle(self, *args: Any, since: datetime | None, dry_run: bool, **options: Any) -> None:
        def said(applied: Applied) -> None:
            if applied.moved:
                self.stdout.write(("would: " if dry_run else "") + applied.outcome)

        try:
            report = sync_provider(since=since, dry_run=dry_run, on_applied=said)
        except (OutcomeUnknown, LeaseLost, DatabaseError) as exc:
            raise CommandError(f"sync_provider stopped: {exc}", returncode=1) from exc
        assert report is not None  # not on the worker's schedule: it always runs or is busy
        self.stdout.write(f"sync_provider: {report.line(dry_run=dry_run)}")
