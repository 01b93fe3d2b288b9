"""Checks for text that the database cannot store or that has no business in a field."""

from __future__ import annotations

import unicodedata


def has_control_characters(value: str) -> bool:
    """Control characters (tab, newline, NUL, ...) and lone surrogates."""
    return any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value)


def has_unstorable_characters(value: str) -> bool:
    """NUL (PostgreSQL text refuses it) and lone surrogates (not encodable as UTF-8)."""
    return any(ch == "\x00" or unicodedata.category(ch) == "Cs" for ch in value)
