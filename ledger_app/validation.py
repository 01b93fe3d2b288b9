"""Request checks shared by the services, done before any read or write."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.mail.message import sanitize_address
from django.core.validators import validate_email

from ledger_app import errors
from ledger_app.text import has_unstorable_characters

MAX_NOTE_LENGTH = 1000
MAX_METADATA_KEYS = 50
MAX_METADATA_KEY_LENGTH = 40
MAX_METADATA_VALUE_LENGTH = 500
# Bidirectional controls: invisible, they reorder what is shown around them, so a key
# holding one can look like another key (Unicode's embeddings, overrides and isolates,
# LRM, RLM and the Arabic letter mark).
BIDI_CONTROLS = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + ["\u200e", "\u200f", "\u061c"]
)


def validate_metadata(metadata: object) -> dict[str, str]:
    """At most 50 string keys of up to 40 characters, with no bidirectional control
    characters in them; string values of up to 500."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA_KEYS:
        raise errors.InvalidMetadata()
    for key, value in metadata.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_METADATA_KEY_LENGTH:
            raise errors.InvalidMetadata()
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_LENGTH:
            raise errors.InvalidMetadata()
        if has_unstorable_characters(key) or has_unstorable_characters(value):
            raise errors.InvalidMetadata("Metadata must not contain NUL or lone surrogates.")
        if not BIDI_CONTROLS.isdisjoint(key):
            raise errors.InvalidMetadata(
                "Metadata keys must not contain bidirectional control characters "
                "(U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C)."
            )
    return dict(metadata)


def merge_metadata(current: dict[str, str], sent: object) -> dict[str, str]:
    """Stripe's metadata update: the keys sent are merged into what is there, a key sent
    with an empty value is removed, and the result is checked like any metadata."""
    if not isinstance(sent, dict):
        raise errors.InvalidMetadata()
    merged = {**current, **sent}
    return validate_metadata({key: value for key, value in merged.items() if value != ""})


def validate_text(value: object, error: type[errors.LedgerError]) -> str:
    """Free text (a note, a description): at most 1000 characters the database can store."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_NOTE_LENGTH:
        raise error()
    if has_unstorable_characters(value):
        raise error(f"{str(error.param).capitalize()} must not contain NUL or lone surrogates.")
    return value


MAX_EMAIL_LENGTH = 254  # RFC 5321's path limit, and the columns'


def validate_email_address(value: object, *, param: str) -> str:
    """An address a customer's mails may go to, as Django's EmailValidator takes one (no
    display name, no line breaks, a domain with a dot or a literal address); "" or None
    for none. Refused with `email_invalid` naming `param`."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_EMAIL_LENGTH:
        raise errors.InvalidEmail(param=param)
    if any(ord(c) < 32 or ord(c) == 127 for c in value) or has_unstorable_characters(value):
        raise errors.InvalidEmail(param=param)  # what a quoted local part would let in
    try:
        validate_email(value)
        sanitize_address(value, "utf-8")  # what the sender will do: IDNA for the domain
    except (ValidationError, ValueError):  # UnicodeError is a ValueError
        raise errors.InvalidEmail(param=param) from None
    return value
