"""Webhook signing secrets at rest: Fernet tokens under WEBHOOK_SECRET_KEYS (MultiFernet: the
first key encrypts, every key decrypts), or under a key derived from DJANGO_SECRET_KEY."""

from __future__ import annotations

import base64
from functools import cache
from typing import cast

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models

# What the derived key is for: a key made from DJANGO_SECRET_KEY for anything else differs.
DERIVED_KEY_INFO = b"ledger_app webhook signing secrets"


def derived_key(secret_key: str) -> bytes:
    """A Fernet key made from Django's secret key (HKDF-SHA256)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=DERIVED_KEY_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


def configured_keys() -> list[bytes]:
    """WEBHOOK_SECRET_KEYS, then the keys derived from DJANGO_SECRET_KEY and its fallbacks:
    the first encrypts. The derived ones decrypt what was written before the variable was
    set (and follow a rotation of Django's key made the Django way)."""
    own = [key.encode() for key in settings.WEBHOOK_SECRET_KEYS]
    return own + [
        derived_key(cast(str, key)) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    ]


@cache
def _fernet(keys: tuple[bytes, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def fernet() -> MultiFernet:
    return _fernet(tuple(configured_keys()))


def encrypt(secret: str) -> str:
    return fernet().encrypt(secret.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        # Never the token or a key in the message.
        raise ImproperlyConfigured(
            "A webhook signing secret cannot be decrypted with WEBHOOK_SECRET_KEYS: was a key "
            "removed before `manage.py rotate_webhook_secrets` ran? (docs/operating/secrets.md)"
        ) from None


class EncryptedSecretField(models.TextField):
    """A text secret stored as a Fernet token: encrypted as it is written, decrypted as it is
    read, so every caller keeps reading and writing plain text. A token differs at every
    write, so no lookup on the column can match a secret (and the admin refuses any)."""

    holds_secret = True  # ledger_app.admin.lookups: never filtered, searched, ordered, exported

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return decrypt(value)


@checks.register(checks.Tags.security, deploy=True)
def check_keys_of_their_own(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if settings.WEBHOOK_SECRET_KEYS:
        return []
    return [
        checks.Warning(
            "WEBHOOK_SECRET_KEYS is not set: webhook signing secrets are encrypted with a key "
            "derived from DJANGO_SECRET_KEY.",
            hint="Give them keys of their own (docs/operating/secrets.md), so that one leaked "
            "or rotated key is not both.",
            id="ledger_app.W201",
        )
    ]
