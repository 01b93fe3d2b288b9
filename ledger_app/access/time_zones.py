"""Times in the reader's zone, in the admin only, and labelled with it wherever they show.

Everything is stored and computed in UTC; the REST API speaks unix timestamps and the
commands write UTC. Only the admin's pages turn a moment into words for a person: in their
own zone (StaffPreference, set on the admin's Time zone page) or settings.ADMIN_TIME_ZONE,
written the one way the formats module says ("2026-11-30 14:23 EST").
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, tzinfo
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import formats, timezone

from ledger_app.access.models import StaffPreference

# Names the tz database ships that are no place anyone lives in.
NOT_PLACES = frozenset({"Factory", "localtime", "posixrules"})


@cache
def zone_names() -> tuple[str, ...]:
    """Every zone a person may choose, sorted (the tz database's names, as zoneinfo has them)."""
    return tuple(sorted(available_timezones() - NOT_PLACES))


def known_zone(name: str) -> ZoneInfo | None:
    """The zone with this name, if it is one a person may choose."""
    if name not in zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def default_zone() -> ZoneInfo:
    return ZoneInfo(settings.ADMIN_TIME_ZONE)  # checked when the settings loaded


def chosen_zone_name(user: Any) -> str:
    """The zone this staff member chose for themselves; "" when they chose none."""
    if not getattr(user, "is_authenticated", False) or not user.is_staff:
        return ""
    found = StaffPreference.objects.filter(user_id=user.pk).values_list("time_zone", flat=True)
    return found.first() or ""


def zone_for(user: Any) -> tzinfo:
    """The zone the admin shows this person times in: their own choice, else the default.
    A stored name the tz database no longer knows falls back to the default too."""
    return known_zone(chosen_zone_name(user)) or default_zone()


def shown_time(moment: datetime | None, empty: str = "—") -> str:
    """A moment as every time is shown to a person: in the active zone, labelled with it
    ("2026-11-30 14:23 EST"), in the same format as the admin's fields and lists."""
    if moment is None:
        return empty
    return formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT")


class AdminTimeZoneMiddleware:
    """Activates the reader's zone for the admin's requests, and only theirs: the API, the
    provider's webhooks and everything else keep the default zone (UTC)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(reverse("admin:index")):
            return self.get_response(request)
        timezone.activate(zone_for(getattr(request, "user", None)))
        try:
            return self.get_response(request)
        finally:
            # The zone is the thread's: the next request on this thread starts from UTC.
            timezone.deactivate()
