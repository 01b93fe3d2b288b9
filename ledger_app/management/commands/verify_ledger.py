"""Recompute the books and report every disagreement; with --provider, against the
provider's balance transactions too."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ledger_app.books.services import days_to_close, unexplained
from ledger_app.counts import count_of
from ledger_app.ledger.drift import count_entries, find_ledger_drift


class Command(BaseCommand):
    help = (
        "Recompute every charge's amount_refunded from its refunds and from the ledger, and "
        "check every stated invariant. Prints each drift; exit 1 if there is any. With "
        "--provider, also compare every day close_books would close, up to yesterday, with "
        "the provider's balance transactions and payouts as sync_provider fetched them "
        "(writing nothing) and print each difference no lead has explained: each is a "
        "drift too."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--provider",
            action="store_true",
            help="Also compare the ledger with the provider's balance transactions.",
        )

    def handle(self, *args: Any, provider: bool, **options: Any) -> None:
        drifts = 0
        for drift in find_ledger_drift():
            drifts += 1
            self.stdout.write(f"DRIFT {drift}")
        if provider:
            today = timezone.now().date()
            past = days_to_close(today)[:-1]  # today's are still being told (sync_provider)
            for found in unexplained(past, today):
                drifts += 1
                self.stdout.write(f"DRIFT {found.reference}: {found.kind}: {found.detail}")
        counted = ", ".join(f"{count} {kind}" for kind, count in count_entries().items())
        self.stdout.write(f"verify_ledger: ledger entries: {counted or 'none'}")
        if drifts:
            raise CommandError(f"verify_ledger: {count_of(drifts, 'drift')} found", returncode=1)
        self.stdout.write("verify_ledger: the books agree")
