"""A lead's resolution of a charge that disagrees with the provider: the provider's
refunds held on it adopted again, now that what stood in the way has settled."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.mirror.adoption import apply_held
from ledger_app.models import Charge


class Command(BaseCommand):
    help = (
        "Apply again the refunds the provider made that the charge could not take when they "
        "were told (docs/lifecycle.md, 'When the provider disagrees'): each that fits now is "
        "adopted and the charge can be refunded again; one that still does not is held. "
        "Exit 0 when the charge agrees with the provider afterwards, 1 when it still does not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("charge", help="The charge's id (ch_...).")
        parser.add_argument("--actor", default="cli", help="Who resolves it, for the log.")

    def handle(self, *args: Any, charge: str, actor: str, **options: Any) -> None:
        if not Charge.objects.filter(pk=charge).exists():
            raise CommandError(f"apply_provider_refunds: no such charge {charge[:64]!r}")
        outcomes = apply_held(charge, actor=f"cli:{actor[:64]}")
        for outcome in outcomes:
            self.stdout.write(outcome)
        if Charge.objects.filter(pk=charge, provider_disagreement__has_key="held").exists():
            raise CommandError(
                f"apply_provider_refunds: charge {charge} still disagrees with the provider",
                returncode=1,
            )
        self.stdout.write(f"apply_provider_refunds: charge {charge} agrees with the provider")
