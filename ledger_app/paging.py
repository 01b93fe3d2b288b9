"""List pages by cursor, newest first, and Stripe's `created` filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import (
    Model,
    Q,
    QuerySet,
)

from ledger_app.errors import ResourceMissing


@dataclass(frozen=True)
class Page:
    items: list[Any]
    has_more: bool


def page_newest_first(
    queryset: QuerySet[Any],
    *,
    limit: int,
    starting_after: str | None = None,
    ending_before: str | None = None,
) -> Page:
    """One page of a list, newest first, by cursor: the id of an object on the previous page.

    Cursors compare (the time it was made, id), so a page does not shift when new objects
    are inserted while a client walks the list. The cursor is read from the database the
    queryset reads (the replica's list pages by the replica's rows).
    """
    model = queryset.model
    made = made_at(model)
    cursor_id = starting_after or ending_before
    if cursor_id is None:
        rows = list(queryset.order_by(f"-{made}", "-id")[: limit + 1])
        return Page(rows[:limit], len(rows) > limit)
    cursors = model.objects.using(queryset.db)
    cursor = cursors.filter(pk=cursor_id).values(made, "id").first()
    if cursor is None:
        param = "starting_after" if starting_after else "ending_before"
        raise ResourceMissing(f"No such {model._meta.verbose_name}: '{cursor_id}'", param=param)
    at, pk = cursor[made], cursor["id"]
    if starting_after:
        older = queryset.filter(Q(**{f"{made}__lt": at}) | Q(**{made: at, "id__lt": pk}))
        rows = list(older.order_by(f"-{made}", "-id")[: limit + 1])
        return Page(rows[:limit], len(rows) > limit)
    newer = queryset.filter(Q(**{f"{made}__gt": at}) | Q(**{made: at, "id__gt": pk}))
    rows = list(newer.order_by(made, "id")[: limit + 1])
    return Page(list(reversed(rows[:limit])), len(rows) > limit)


def made_at(model: type[Model]) -> str:
    """The field that says when `model`'s objects were made: `created_at`, or `created`
    on the provider's objects the books mirror (the time the provider gave them)."""
    fields = {field.name for field in model._meta.get_fields()}
    return "created_at" if "created_at" in fields else "created"


def created_in(bounds: dict[str, int] | None, field: str = "created_at") -> Q:
    """Stripe's `created` filter on created_at (or on another moment, `field`: a payout's
    arrival_date): {"eq", "gt", "gte", "lt" or "lte": unix seconds}. An object's `created`
    is its created_at in whole seconds, so created[gt]=T starts at T+1 and created=T is
    anything within second T."""
    condition = Q()
    for operator, seconds in (bounds or {}).items():
        start, end = _moment(seconds), _moment(seconds + 1)
        condition &= {
            "eq": Q(**{f"{field}__gte": start, f"{field}__lt": end}),
            "gt": Q(**{f"{field}__gte": end}),
            "gte": Q(**{f"{field}__gte": start}),
            "lt": Q(**{f"{field}__lt": start}),
            "lte": Q(**{f"{field}__lt": end}),
        }[operator]
    return condition


def _moment(seconds: int) -> datetime:
    """Unix seconds as a datetime; past the last one a datetime holds, that last one."""
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return datetime.max.replace(tzinfo=UTC)
