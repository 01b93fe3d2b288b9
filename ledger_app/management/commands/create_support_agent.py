"""Create a staff user in the Support agents group, with a second factor, and print
their password and what they need to enrol the factor, once."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger_app.access.second_factor import enrol_totp, enrolment_instructions

GROUP = "Support agents"


class Command(BaseCommand):
    help = (
        "Create a support agent: staff, in the Support agents group (view + refund), with "
        "an authenticator (TOTP) the admin asks a code from before refunds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, username: str, email: str, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(username=username).exists():
            raise CommandError(f"user {username!r} exists already")
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            user = users.objects.create_user(username, email, password, is_staff=True)
            user.groups.add(Group.objects.get(name=GROUP))
            device = enrol_totp(user)
        self.stdout.write(f"Support agent: {username} / {password}  (shown this once)")
        self.stdout.write(enrolment_instructions(device))
