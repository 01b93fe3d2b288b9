"""Close the books against the provider, day by day (ledger_app/books/services.py)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.books.services import close_books


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"close_books: --day {text[:40]!r} is not a date (YYYY-MM-DD)") from None


class Command(BaseCommand):
    help = (
        "Compare each day (UTC) of the ledger with the provider's balance transactions and "
        "payouts as sync_provider last fetched them, and record per day and currency: the "
        "value refunded, the value matched and paid out (or explained), the unexplained "
        "differences by kind, and whether the day is closed. Without --day: every day from "
        "the oldest balance transaction sync_provider fetched (at most BOOKS_CLOSE_DAYS back) "
        "to today that is due: the last 7 days, an older one not closed or with something "
        "new from the provider (--all: every one). Prints a line "
        "per day and currency; exit 1 when a day has a difference nobody explained."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--day", type=_day, help="Close this day only (YYYY-MM-DD, UTC).")
        parser.add_argument(
            "--all",
            action="store_true",
            dest="every_day",
            help="Close every day of the window again, the settled closed ones too.",
        )

    def handle(self, *args: Any, day: date | None, every_day: bool, **options: Any) -> None:
        closed = close_books(day, every_day=every_day)
        if closed is None:
            self.stdout.write("close_books: another run is under way; nothing done")
            return
        for one in closed:
            self.stdout.write(one.line())
        still_open = [one for one in closed if one.status == "open"]
        self.stdout.write(
            f"close_books: {len(closed) - len(still_open)} of {len(closed)} days "
            "closed or waiting for payouts"
        )
        if still_open:
            raise CommandError(
                f"close_books: {len(still_open)} days have differences nobody explained "
                "(admin: Books against the provider)",
                returncode=1,
            )
