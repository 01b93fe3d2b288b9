"""Recompute the books and report every disagreement."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ledger_app.counts import count_of
from ledger_app.ledger.drift import find_ledger_drift


class Command(BaseCommand):
    help = (
        "Recompute every charge's amount_refunded from its refunds and from the ledger, and "
        "check every stated invariant. Prints each drift; exit 1 if there is any."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        drifts = 0
        for drift in find_ledger_drift():
            drifts += 1
            self.stdout.write(f"DRIFT {drift}")
        if drifts:
            raise CommandError(f"verify_ledger: {count_of(drifts, 'drift')} found", returncode=1)
        self.stdout.write("verify_ledger: the books agree")
