"""The Stripe API versions the back office speaks, and what differs between them.

Stripe dates its versions; a client pins one (its key's default, or `Stripe-Version` on a
request; every SDK release sends the version of its day) and gets that version's shapes.
Every published version (published.py) is answered in its own shape: objects are rendered
as today's API shows them, and `shown_in` turns them into an older version's shape with
the changes in changes.py, the one place that knows what differs. A version named after
the newest this server knows (`YYYY-MM-DD.name`, a later date) is answered as the newest,
and the answer says so (api/versions.py); anything else is not a version and is refused."""

from __future__ import annotations

import re
from datetime import date
from functools import cache
from typing import Any

from django.conf import settings

from ledger_app.api_versions.changes import CHANGES, Change
from ledger_app.api_versions.published import PUBLISHED

__all__ = ["CHANGES", "LATEST", "LEGACY", "PUBLISHED", "Change"]

# The newest published version this server knows.
LATEST = PUBLISHED[-1]
# What keys and webhook endpoints made before versions existed here keep (migration 0023),
# so their clients see what they always saw.
LEGACY = "2020-08-27"
ORDER = {version: index for index, version in enumerate(PUBLISHED)}
# A version's form since 2024-09: a date and a release's name.
NAMED_FORM = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\.[a-z]{1,20}\Z")


def resolve(asked: object) -> str | None:
    """The version to answer `asked` in: itself when published; the newest known when it
    is a version named after it (`YYYY-MM-DD.name` with a later date); None when it is not
    a version (another form, an unpublished name or date, a date that does not exist)."""
    if not isinstance(asked, str):
        return None
    if asked in ORDER:
        return asked
    match = NAMED_FORM.match(asked)
    if match is None:
        return None
    try:
        day = date(*(int(part) for part in match.groups()))
    except ValueError:
        return None
    return LATEST if day.isoformat() > LATEST[:10] else None


def account_default() -> str:
    """The version new keys and webhook endpoints answer in when none is given: the
    DEFAULT_API_VERSION setting (the newest, unless set), as Stripe's account default."""
    return resolve(settings.DEFAULT_API_VERSION) or LATEST


def chosen(asked: str | None) -> str | None:
    """The version a new key or webhook endpoint answers in: the account default when
    none is asked for, else what `asked` resolves to (None: not a version)."""
    return account_default() if asked is None else resolve(asked)


def _read_before(touches: str) -> str:
    return next(c.version for c in CHANGES if c.touches == touches and c.read_when_rendered)


# The first versions without a charge's refunds and a PaymentIntent's charges (read once:
# every refund asks, for each webhook endpoint).
REFUNDS_NOT_EMBEDDED_FROM = _read_before("charge")
CHARGES_NOT_EMBEDDED_FROM = _read_before("payment_intent")


def embeds_refunds(version: str) -> bool:
    """Whether a charge shown in this version carries its `refunds` unasked."""
    return _comes_before(version, REFUNDS_NOT_EMBEDDED_FROM)


def embeds_charges(version: str) -> bool:
    """Whether a PaymentIntent shown in this version carries its `charges`."""
    return _comes_before(version, CHARGES_NOT_EMBEDDED_FROM)


def _comes_before(version: str, first: str) -> bool:
    return ORDER.get(version, len(ORDER)) < ORDER[first]


@cache
def _older_changes(version: str) -> tuple[Change, ...]:
    """The changes after `version` that reshape a rendered object, newest first (a stored
    version that is not published, as none should be, is taken as the newest)."""
    version = resolve(version) or LATEST
    return tuple(
        change
        for change in reversed(CHANGES)
        if _comes_before(version, change.version) and (change.older or change.events_told_as)
    )


def told_as(version: str, event_type: str) -> str | None:
    """What `version` calls an event recorded as `event_type` (None: that version is not
    sent such an event)."""
    for change in _older_changes(version):
        if event_type in change.events_told_as:
            return change.events_told_as[event_type]
    return event_type


def recorded_types(version: str, recorded: list[str], wanted) -> list[str]:
    """Of the `recorded` event types, those that `version` tells under a type for which
    `wanted(told_type)` is true."""
    shown = ((name, told_as(version, name)) for name in recorded)
    return [name for name, told in shown if told is not None and wanted(told)]


def shown_in(data: Any, version: str) -> Any:
    """`data` (an object as today's API renders it, a list of them, or any JSON holding
    them) as `version` shows it: every object in it reshaped by the changes after that
    version, innermost first. Metadata is the client's own and is never looked into."""
    changes = _older_changes(version)
    return _reshaped(data, version, changes) if changes else data


def _reshaped(value: Any, version: str, changes: tuple[Change, ...]) -> Any:
    if isinstance(value, list):
        return [_reshaped(item, version, changes) for item in value]
    if not isinstance(value, dict):
        return value
    shown = {
        name: item if name == "metadata" else _reshaped(item, version, changes)
        for name, item in value.items()
    }
    kind = shown.get("object")
    for change in changes:
        if change.touches != kind:
            continue
        if change.older is not None:
            shown = change.older(shown)
        if kind == "event" and shown.get("type") in change.events_told_as:
            shown["type"] = change.events_told_as[shown["type"]] or shown["type"]
    return shown


def unsupported_message(version: str) -> str:
    return (
        f"Invalid Stripe API version: {version[:40]!r}. Send a published version (the "
        f"newest this server knows is {LATEST}; any published since 2011-01-01 is "
        "answered in its own shape), or none for your key's default."
    )
