"""Production refuses to start on a secret that is not one: a placeholder from the shipped
examples (deploy/*.env, the docs) or a value too short to be random. Read by settings.py
in production mode only (DJANGO_DEBUG false); the error names the variable, never its
value. docs/operating/secrets.md lists the minimum lengths."""

from __future__ import annotations

import base64
import binascii
import string
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

# Characters, at least: 32 for DJANGO_SECRET_KEY, where `check --deploy` still warns under
# Django's 50 (security.W009). The others are random strings that their makers hand out long:
# Stripe's webhook secrets are whsec_ and 32 or more, its API keys sk_live_ and 24 or more.
MINIMUM_LENGTHS = {
    "DJANGO_SECRET_KEY": 32,
    "STRIPE_WEBHOOK_SECRET": 32,
    "STRIPE_API_KEY": 24,
    "METRICS_TOKEN": 24,
}
# Fernet keys, comma-separated: always 32 bytes (settings.py checks the format).
FERNET_KEYS = "WEBHOOK_SECRET_KEYS"

# What the shipped examples write instead of a secret (deploy/production.env's
# "replace-with-...", the docs' "whsec_..." and "<new>"), and the usual others. No random
# string of the alphabets secrets are made of (base64, hex, Stripe's) holds any of them.
# tests/test_production_settings.py reads every secret-looking value of deploy/*.env and
# the docs and checks that each is refused.
PLACEHOLDER_MARKS = (
    "replace",
    "changeme",
    "change-me",
    "change_me",
    "placeholder",
    "...",
    "\u2026",
    "<",
    ">",
)


def is_placeholder(value: str) -> bool:
    lowered = value.lower()
    return any(mark in lowered for mark in PLACEHOLDER_MARKS)


def typed_fernet_key(key: str) -> bool:
    """A Fernet key whose 32 bytes are all printable text was typed, not generated (a
    random key is all printable with odds of about 1 in 10^13): the shipped example decodes
    to "replace-with-a-key-of-your-own!!"."""
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (ValueError, binascii.Error):
        return False  # settings.py refuses it as not a Fernet key
    return all(chr(byte) in string.printable for byte in raw)


def refuse_weak_secrets(environ: Mapping[str, str]) -> None:
    """Raise ImproperlyConfigured, naming the variable, for the first secret in `environ`
    that is a placeholder or shorter than its minimum; unset secrets are left to the
    settings that need them."""
    for name, minimum in MINIMUM_LENGTHS.items():
        value = environ.get(name, "").strip()
        if not value:
            continue
        if is_placeholder(value):
            raise ImproperlyConfigured(_placeholder(name))
        if len(value) < minimum:
            raise ImproperlyConfigured(
                f"{name} is {len(value)} characters: production needs {minimum} or more, "
                "random (docs/operating/secrets.md, Secrets in the environment)"
            )
    keys = [k.strip() for k in environ.get(FERNET_KEYS, "").split(",") if k.strip()]
    for number, key in enumerate(keys, 1):
        if is_placeholder(key) or typed_fernet_key(key):
            raise ImproperlyConfigured(_placeholder(f"{FERNET_KEYS}: key {number}"))


def _placeholder(what: str) -> str:
    return (
        f"{what} is a placeholder from the shipped examples, not a secret: make one of "
        "your own (docs/operating/secrets.md, Secrets in the environment)"
    )
