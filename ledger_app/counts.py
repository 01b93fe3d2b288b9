"""How counts are written for people: "1 row", "3 rows", "1 delivery", "2 deliveries"."""

from __future__ import annotations


def count_of(count: int, singular: str, plural: str | None = None) -> str:
    """The count and its noun, singular for exactly one (`plural` defaults to singular + s)."""
    return f"{count} {singular if count == 1 else (plural or singular + 's')}"
