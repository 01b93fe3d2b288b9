"""Mint an API key and print its secret once."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app import api_versions
from ledger_app.access.api_keys import create_api_key


class Command(BaseCommand):
    help = "Create an API key for a client system. The secret is printed once and never stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who the key is for, e.g. 'order-service'.")
        parser.add_argument(
            "--read-only", action="store_true", help="The key may read but not create."
        )
        parser.add_argument(
            "--api-version",
            help="The Stripe API version its requests get without a Stripe-Version header: "
            f"any published one (default the account's, DEFAULT_API_VERSION, else "
            f"{api_versions.LATEST}).",
        )

    def handle(
        self, *args: Any, name: str, read_only: bool, api_version: str | None, **options: Any
    ) -> None:
        try:
            key, secret = create_api_key(name=name, read_only=read_only, api_version=api_version)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        access = "read-only" if key.read_only else "read-write"
        self.stderr.write(
            f"API key {key.prefix}... for {key.name!r} ({access}, API version "
            f"{key.api_version}). Shown once:"
        )
        self.stdout.write(secret)
