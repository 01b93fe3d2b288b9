"""Give a staff user a new authenticator (TOTP): a new person, a superuser made with
createsuperuser, or a lost phone. Any earlier one stops working."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.access.second_factor import enrol_totp, enrolment_instructions


class Command(BaseCommand):
    help = (
        "Enrol a new authenticator (TOTP) for a staff user, replacing any earlier one, and "
        "print what they need to add it to their app (shown this once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if not user.is_staff:
            raise CommandError(f"{username!r} is not staff: only the admin asks for a code")
        device = enrol_totp(user)
        self.stdout.write(f"New authenticator for {username}; any earlier one no longer works.")
        self.stdout.write(enrolment_instructions(device))
