"""Reading what the provider sends (an event's object, a page of a list): every value is
outside input, checked here before any query names it or any row keeps it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from ledger_app.text import has_control_characters

# Stripe's ids are a prefix and letters, digits or underscores; ours (metadata) are too.
# ProviderEvent.id and the provider id columns hold 255.
OBJECT_ID = re.compile(r"[A-Za-z0-9_]{1,255}")
SHOWN = 60  # characters of an outside value that an outcome or a log line quotes
# Stripe's `created` is seconds since 1970; before 2000 or past 2100 it is not one.
FIRST_CREATED, LAST_CREATED = 946_684_800, 4_102_444_800


@dataclass(frozen=True)
class Applied:
    """What applying one of the provider's objects did, as an outcome line."""

    outcome: str
    ignored: bool = False  # about nothing here that it may change (logged at WARNING)
    moved: bool = False  # it wrote something: a charge, a refund, a settle, a hold


def is_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and OBJECT_ID.fullmatch(value) is not None


def id_of(value: Any) -> Any:
    """A reference to another object: its id, or the object's id when the provider
    expanded it (`charge`, `customer`, `payment_intent`)."""
    return value.get("id") if isinstance(value, dict) else value


def charge_of(obj: dict[str, Any]) -> Any:
    """A refund's (or dispute's) charge: its id, or the charge object's when expanded."""
    return id_of(obj.get("charge"))


def metadata_of(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def shown(value: Any) -> str:
    """An outside value as an outcome or log line may quote it: ids as they are, anything
    else escaped (no newline, NUL or surrogate gets through) and cut short."""
    if is_id(value) and len(value) <= SHOWN:
        return value
    return repr(value)[:SHOWN]


def text(value: Any, limit: int) -> str:
    """An outside string as the database can store it and a log line can quote it, at most
    `limit` characters: with a control character (or a NUL, a lone surrogate) escaped."""
    found = value if isinstance(value, str) else ""
    return found[:limit] if not has_control_characters(found) else repr(found)[:limit]


def created_of(obj: dict[str, Any]) -> datetime | None:
    """The object's `created` time, None when it has none that could be one."""
    created = obj.get("created")
    if type(created) is not int or not FIRST_CREATED <= created <= LAST_CREATED:
        return None
    return datetime.fromtimestamp(created, tz=UTC)


def amount_of(value: Any) -> int | None:
    """A positive amount of minor units that a bigint column holds, else None."""
    if type(value) is not int or not 0 < value < 2**63:
        return None
    return value
