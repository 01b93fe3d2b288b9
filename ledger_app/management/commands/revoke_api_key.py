"""Revoke an API key by its prefix; it stops working at once."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.access.api_keys import revoke_api_key
from ledger_app.access.models import ApiKey
from ledger_app.access.time_zones import shown_time


class Command(BaseCommand):
    help = "Revoke the API key with this prefix (as list_api_keys shows it, e.g. sk_AbC12345)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        try:
            key = revoke_api_key(prefix=prefix.rstrip("."))
        except ApiKey.DoesNotExist:
            raise CommandError(f"no API key with prefix {prefix!r}", returncode=1) from None
        self.stdout.write(f"revoked {key.prefix}... ({key.name}) at {shown_time(key.revoked_at)}")
