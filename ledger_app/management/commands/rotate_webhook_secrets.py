"""Encrypt every webhook signing secret again under the first of WEBHOOK_SECRET_KEYS: the step
between adding a new key in front and removing the old one (docs/operating/secrets.md)."""

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger_app.counts import count_of
from ledger_app.events.models import WebhookEndpoint


class Command(BaseCommand):
    help = (
        "Re-encrypt every webhook endpoint's signing secret with the first key of "
        "WEBHOOK_SECRET_KEYS (any listed key may have encrypted it). Run it after putting a "
        "new key first; remove the old key only once it has finished."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only check that every secret decrypts with the keys given; write nothing.",
        )

    def handle(self, *args: Any, dry_run: bool = False, **options: Any) -> None:
        done = 0
        # The ids first (a few dozen endpoints), then each in a transaction of its own.
        for pk in list(WebhookEndpoint.objects.order_by("pk").values_list("pk", flat=True)):
            with transaction.atomic():
                try:
                    # Read: decrypted with whichever key encrypted it. Written: encrypted
                    # with the first key (EncryptedSecretField.get_prep_value).
                    endpoint = WebhookEndpoint.objects.select_for_update().get(pk=pk)
                except ImproperlyConfigured as exc:
                    raise CommandError(
                        f"{exc} Endpoint {pk} was left as it was, after "
                        f"{count_of(done, 'secret')} {'checked' if dry_run else 're-encrypted'}.",
                        returncode=1,
                    ) from None
                if not dry_run:
                    WebhookEndpoint.objects.filter(pk=pk).update(secret=endpoint.secret)
            done += 1
        counted = count_of(done, "webhook signing secret")
        self.stdout.write(f"would re-encrypt {counted}" if dry_run else f"re-encrypted {counted}")
