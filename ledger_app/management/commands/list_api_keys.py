"""List API keys: prefix, name, access, state. Secrets are not stored, so never shown."""

from typing import Any

from django.core.management.base import BaseCommand

from ledger_app.access.models import ApiKey
from ledger_app.counts import count_of


class Command(BaseCommand):
    help = "List API keys by prefix; secrets are never stored and cannot be shown."

    def handle(self, *args: Any, **options: Any) -> None:
        keys = ApiKey.objects.order_by("created_at")
        for key in keys:  # a few dozen at most
            access = "read-only" if key.read_only else "read-write"
            state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
            self.stdout.write(
                f"{key.prefix}...  {access:<10}  {state:<18}  {key.created_at:%Y-%m-%d}  {key.name}"
            )
        self.stdout.write(count_of(keys.count(), "key"))
