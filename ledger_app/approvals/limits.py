"""Refund limits: how much a requester may refund without another person's approval.

A requester is a staff user (their own RefundLimit rows win over their groups'; among
groups the highest limit counts) or an API key. Commands run by an operator on the
server are not limited (`bulk_refund --requested-by USER` refunds as that user, with
their limits). A requester with no row at all is not limited; one with rows in other
currencies but none in the refund's waits for approval on every refund in it
(`limits_in`; REFUND_LIMIT_OTHER_CURRENCIES=allow lets those through instead).

The daily total is what the requester's refunds in that currency since midnight UTC
took from charges on their own authority and kept (pending, unknown or succeeded; not
those waiting for approval, approved by someone else, declined or canceled).
`create_refund` checks it under a lock held per requester, so two requests at once cannot
both fit under what is left of the day.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, time
from zlib import crc32

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import OperationalError, connection
from django.db.models import Q, Sum

from ledger_app import errors
from ledger_app.approvals.models import RefundLimit
from ledger_app.approvals.selectors import api_key_limits
from ledger_app.charges.models import MovementStatus
from ledger_app.db import before_lock_wait, is_lock_timeout
from ledger_app.refunds.models import Refund

# Refunds that count against the day: what went through without waiting for anyone.
SPENT_STATUSES = (MovementStatus.PENDING, MovementStatus.UNKNOWN, MovementStatus.SUCCEEDED)
# A PostgreSQL advisory lock space of this app's own (the first key of the pair).
LOCK_SPACE = 0x7265


@dataclass(frozen=True)
class Limits:
    per_refund: int | None = None
    per_day: int | None = None

    @property
    def any(self) -> bool:
        return self.per_refund is not None or self.per_day is not None


NO_LIMITS = Limits()
# No RefundLimit row may be 0 (they are positive): this one is only ever made here, for a
# currency a limited requester has no row in. Every refund is above it.
EVERY_REFUND_WAITS = Limits(per_refund=0)


def limits_by_currency(
    *, user: AbstractBaseUser | None = None, actor_label: str = ""
) -> dict[str, Limits]:
    """The requester's limits per currency, in one query: a user's own row for a currency,
    else their groups' highest; an API key's (`api_key:<prefix>` label); otherwise none."""
    rows: Iterable[RefundLimit]
    if user is not None:
        rows = RefundLimit.objects.filter(Q(user=user) | Q(group__user=user))
    elif actor_label.startswith("api_key:"):
        rows = api_key_limits(actor_label.removeprefix("api_key:"))
    else:
        return {}
    own: dict[str, Limits] = {}
    by_group: dict[str, list[RefundLimit]] = {}
    for row in rows:
        if row.group_id is None:
            own[row.currency] = Limits(row.per_refund, row.per_day)
        else:
            by_group.setdefault(row.currency, []).append(row)
    return {**{c: _highest(group_rows) for c, group_rows in by_group.items()}, **own}


def limits_in(requester_limits: dict[str, Limits], currency: str) -> Limits:
    """The requester's limits (`limits_by_currency`) in one currency: their row's; with no row in
    any currency, none; with rows only in others, every refund waits for approval
    (REFUND_LIMIT_OTHER_CURRENCIES=approve, the default) or none (allow). Every check of
    a refund against its requester's limits reads them here."""
    found = requester_limits.get(currency)
    if found is not None:
        return found
    if requester_limits and settings.REFUND_LIMIT_OTHER_CURRENCIES == "approve":
        return EVERY_REFUND_WAITS
    return NO_LIMITS


def limits_in_currency(
    *, user: AbstractBaseUser | None = None, actor_label: str = "", currency: str
) -> Limits:
    """The requester's limits in one currency (`limits_in`)."""
    return limits_in(limits_by_currency(user=user, actor_label=actor_label), currency)


def _highest(rows: list[RefundLimit]) -> Limits:
    """Several groups: each kind of limit is the highest any of them grants; a group that
    leaves a kind blank grants it without limit."""

    def most(values: list[int | None]) -> int | None:
        return None if any(v is None for v in values) else max(values)  # type: ignore[type-var]

    return Limits(most([r.per_refund for r in rows]), most([r.per_day for r in rows]))


def spent_today_if_limited(
    actor_label: str, requester_limits: dict[str, Limits], now: datetime
) -> dict[str, int]:
    """With a daily limit in some currency: the requester's lock, taken for the rest of the
    transaction (before any charge lock: one lock order), then today's totals in those
    currencies, read under it. Without: nothing locked or read."""
    currencies = [c for c, found in requester_limits.items() if found.per_day is not None]
    if not currencies:
        return {}
    lock_requester(actor_label)
    totals = (
        Refund.objects.filter(spent_by(actor_label, now), currency__in=currencies)
        .values_list("currency")
        .annotate(total=Sum("amount"))
    )
    return dict(totals)


def spent_by(actor_label: str, now: datetime) -> Q:
    """The requester's refunds since midnight UTC (of `now`) that count against their day."""
    midnight = datetime.combine(now.astimezone(UTC).date(), time(), tzinfo=UTC)
    return Q(
        actor=actor_label, created_at__gte=midnight, status__in=SPENT_STATUSES, decided_at=None
    )


def spent_today(*, actor_label: str, currency: str, now: datetime) -> int:
    """What this requester's refunds in `currency` took since midnight UTC on their own
    authority and kept (an approved one was another person's decision)."""
    total = Refund.objects.filter(spent_by(actor_label, now), currency=currency).aggregate(
        total=Sum("amount")
    )["total"]
    return total or 0


def lock_requester(actor_label: str) -> None:
    """Serialise one requester's refunds for the rest of the transaction, so their daily
    total is read and added to by one request at a time. (SQLite's IMMEDIATE transactions
    already serialise every write.)"""
    if connection.vendor == "postgresql":
        try:
            before_lock_wait()  # what the key's claim left of the budget
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)",
                    [LOCK_SPACE, crc32(actor_label.encode()) - 2**31],
                )
        except OperationalError as exc:  # past DATABASE_LOCK_TIMEOUT_MS: retry with the key
            if is_lock_timeout(exc):
                raise errors.LockTimeout(
                    "Another refund by the same requester is still being made. Retry with "
                    "the same key shortly."
                ) from exc
            raise


def needs_approval(limits: Limits, *, amount: int, spent: int) -> bool:
    """Over the per-refund limit, or over what is left of the day: exactly at either is
    allowed."""
    if limits.per_refund is not None and amount > limits.per_refund:
        return True
    return limits.per_day is not None and spent + amount > limits.per_day
