"""Remove old idempotency keys whose outcome is final."""

from django.core.management.base import BaseCommand, CommandError

from ledger_app.counts import count_of
from ledger_app.selectors import purgeable_keys
from ledger_app.services.retention import purge_idempotency_keys


class Command(BaseCommand):
    help = (
        "Delete idempotency keys older than --older-than DAYS whose refund (or charge) is "
        "final (succeeded or failed). Keys of pending or unknown refunds are always kept. "
        "After a key is purged, a request that reuses it is treated as a new request."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, required=True, metavar="DAYS")
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")

    def handle(self, *args, older_than, dry_run, **options):
        if not 1 <= older_than <= 36_500:
            raise CommandError("--older-than must be 1 to 36500 days", returncode=2)
        if dry_run:
            count = purgeable_keys(older_than_days=older_than).count()
            self.stdout.write(
                f"purge_idempotency_keys (dry run): {count_of(count, 'key')} would be deleted"
            )
            return
        count = purge_idempotency_keys(older_than_days=older_than)
        self.stdout.write(f"purge_idempotency_keys: {count_of(count, 'key')} deleted")
