"""API keys: minted here, shown once, stored only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string

from django.utils import timezone

from ledger_app import api_versions
from ledger_app.access.models import ApiKey
from ledger_app.access.selectors import active_api_key

ALPHABET = string.ascii_letters + string.digits
PREFIX_LENGTH = 11  # "sk_" and 8 characters: enough to tell keys apart, useless to an attacker
SECRET_LENGTH = 40  # after "sk_": about 238 random bits
KEY_FORMAT = re.compile(rf"^sk_[A-Za-z0-9]{{{SECRET_LENGTH}}}$")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_api_key(
    *, name: str, read_only: bool = False, api_version: str | None = None
) -> tuple[ApiKey, str]:
    """Mint a key, answering in `api_version` (the account default when None) unless a
    request says otherwise; returns the row and the secret, which is never stored or
    shown again."""
    if not isinstance(name, str) or not 0 < len(name.strip()) <= 100:
        raise ValueError("an API key needs a name of 1 to 100 characters")
    answered = api_versions.chosen(api_version)
    if answered is None:
        raise ValueError(api_versions.unsupported_message(str(api_version)))
    secret = "sk_" + "".join(secrets.choice(ALPHABET) for _ in range(SECRET_LENGTH))
    key = ApiKey.objects.create(
        name=name.strip(),
        prefix=secret[:PREFIX_LENGTH],
        secret_hash=_digest(secret),
        read_only=read_only,
        api_version=answered,
    )
    return key, secret


def authenticate_api_key(secret: str) -> ApiKey | None:
    """The active key with this secret, or None. Compares digests in constant time."""
    if not isinstance(secret, str) or not KEY_FORMAT.match(secret):
        return None
    key = active_api_key(secret[:PREFIX_LENGTH])
    if key is None or not hmac.compare_digest(key.secret_hash, _digest(secret)):
        return None
    return key


def revoke_api_key(*, prefix: str) -> ApiKey:
    key = ApiKey.objects.get(prefix=prefix)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key
