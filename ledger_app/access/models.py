"""API keys (hashed, shown once) and each staff member's preferences."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from ledger_app import api_versions


class ApiKey(models.Model):
    """An API client's key. Only a SHA-256 hash of the secret is stored; the prefix
    identifies the key in lists and logs. Secrets are 190 random bits, so a fast hash is
    enough: there is nothing to guess."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    read_only = models.BooleanField(default=False)
    api_version = models.CharField(
        max_length=32,
        default=api_versions.account_default,
        help_text="The Stripe API version its requests get without a Stripe-Version header.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class StaffPreference(models.Model):
    """What one staff member chose for how the admin shows things to them: the zone they
    read times in (blank: settings.ADMIN_TIME_ZONE). Set on the admin's Time zone page."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_preference"
    )
    time_zone = models.CharField(
        max_length=64, blank=True, help_text="An IANA name such as Europe/Paris."
    )

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone or 'default zone'})"
