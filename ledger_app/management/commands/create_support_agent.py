"""Create a staff user in the Support agents group and print its password once."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

GROUP = "Support agents"


class Command(BaseCommand):
    help = "Create a support agent: staff, in the Support agents group (view + refund)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, email, **options):
        users = get_user_model()
        if users.objects.filter(username=username).exists():
            raise CommandError(f"user {username!r} exists already")
        password = secrets.token_urlsafe(12)
        user = users.objects.create_user(username, email, password, is_staff=True)
        user.groups.add(Group.objects.get(name=GROUP))
        self.stdout.write(f"Support agent: {username} / {password}  (shown this once)")
