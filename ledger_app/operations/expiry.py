"""What expires, kind by kind (`KINDS`): each kind's tables, the rule that selects a
table's expired rows, the indexed column a run walks them by, and how long the kind is
kept (its setting, or its own rule). retention.py removes them.

Never selected here: charges, refunds, ledger entries, the admin's log, the provider's own
books, nor anything a charge or refund that is not final still needs (its events and their
deliveries, its idempotency key). docs/operating/retention.md says what is kept, how long
and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.db import models
from django.db.models import Exists, OuterRef, QuerySet

from ledger_app.charges.models import Charge, MovementStatus, ProviderMovement
from ledger_app.events.models import Event, WebhookDelivery
from ledger_app.idempotency.selectors import purgeable_keys
from ledger_app.operations import rate_counters
from ledger_app.provider.models import ProviderEvent
from ledger_app.refunds.models import Refund
from simulated_provider.models import ProviderRequest

# What may still move money or wait for a decision: every status that is not final, read
# from the choices, so that a status added later is kept until someone calls it final.
NOT_FINAL = tuple(s for s in MovementStatus.values if s not in ProviderMovement.FINAL_STATUSES)


@dataclass(frozen=True)
class Table:
    """One table of a kind: what has expired in it (`expired(now, cutoff)`), walked oldest
    first by an indexed column, `order_by`, in batches, each selected and deleted by
    `by` (the primary key, or a column the rule narrows to exactly the expired rows).
    `dependents` deletes (and counts) the rows that must go before a batch of it can."""

    noun: str
    plural: str
    expired: Callable[[datetime, datetime], QuerySet[Any]]
    order_by: str
    dependents: Dependents | None = None
    by: str = "pk"


@dataclass(frozen=True)
class Dependents:
    noun: str
    plural: str
    delete: Callable[[list[Any]], int]  # given a batch's ids: how many it deleted
    count: Callable[[QuerySet[Any]], int]  # given what has expired: how many would go


@dataclass(frozen=True)
class Kind:
    """What a summary line and `retention_days` call `name`; kept `setting` days (its
    name in settings), or by its own rule when `setting` is None (`rule`)."""

    name: str
    label: str
    setting: str | None
    tables: tuple[Table, ...]
    rule: str = ""


def expired_events(now: datetime, cutoff: datetime) -> QuerySet[Event]:
    """Events created before `cutoff`, except an event with a delivery still pending (being
    sent, or waiting for a retry) and every event of a charge that is not final or has a
    refund that is not final (pending, unknown, awaiting approval): that money's story is
    still being written, and support reads it there."""
    pending = WebhookDelivery.objects.filter(
        event=OuterRef("pk"), status=WebhookDelivery.Status.PENDING
    )
    open_charge = Charge.objects.filter(pk=OuterRef("charge_id"), status__in=NOT_FINAL)
    open_refund = Refund.objects.filter(pk=OuterRef("refund_id"), status__in=NOT_FINAL)
    open_refund_of_charge = Refund.objects.filter(
        charge_id=OuterRef("charge_id"), status__in=NOT_FINAL
    )
    return (
        Event.objects.filter(created_at__lt=cutoff)
        .exclude(Exists(pending))
        .exclude(Exists(open_charge))
        .exclude(Exists(open_refund))
        .exclude(Exists(open_refund_of_charge))
    )


def _delete_deliveries(event_ids: list[Any]) -> int:
    # Status in the DELETE itself: a delivery resent meanwhile (pending again) stays, and
    # then so does its event (expired_events no longer selects it).
    rows = WebhookDelivery.objects.filter(event_id__in=event_ids).exclude(
        status=WebhookDelivery.Status.PENDING
    )
    return rows.delete()[1].get(WebhookDelivery._meta.label, 0)


def _count_deliveries(events: QuerySet[Any]) -> int:
    return WebhookDelivery.objects.filter(event__in=events.values("pk")).count()


def expired_keys(now: datetime, cutoff: datetime) -> QuerySet[Any]:
    """Idempotency keys created before `cutoff` whose refund or charge is final: the
    selector's rule (purgeable_keys), as the run's clock reads it."""
    return purgeable_keys(older_than_days=(now - cutoff).days, now=now)


def ended_rate_windows(now: datetime, cutoff: datetime) -> QuerySet[Any]:
    """Rate counters of windows that have ended (rate_counters' own rule and clock)."""
    return rate_counters.ended_windows(now=now)


def expired_access_attempts(now: datetime, cutoff: datetime) -> QuerySet[Any]:
    """Failed sign-in counts last bumped before `cutoff`, and never one whose lockout
    (LOGIN_LOCKOUT_MINUTES) may still be running, whatever the retention says."""
    cooloff = settings.AXES_COOLOFF_TIME
    if isinstance(cooloff, timedelta):
        cutoff = min(cutoff, now - cooloff)
    attempts: QuerySet[Any] = AccessAttempt.objects.filter(attempt_time__lt=cutoff)
    return attempts  # typed here: django-axes ships no types


def _older(model: type[models.Model], field: str) -> Callable[[datetime, datetime], QuerySet[Any]]:
    def expired(now: datetime, cutoff: datetime) -> QuerySet[Any]:
        return model._default_manager.filter(**{f"{field}__lt": cutoff})

    expired.__doc__ = f"{model._meta.label} rows whose {field} is before the cutoff."
    return expired


EVENTS = Kind(
    "events",
    "events",
    "EVENT_RETENTION_DAYS",
    (
        Table(
            "event",
            "events",
            expired_events,
            "created_at",
            Dependents(
                "webhook delivery", "webhook deliveries", _delete_deliveries, _count_deliveries
            ),
        ),
    ),
)
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        EVENTS,
        Kind(
            "provider_events",
            "provider events",
            "PROVIDER_EVENT_RETENTION_DAYS",
            (
                Table(
                    "provider event",
                    "provider events",
                    _older(ProviderEvent, "received_at"),
                    "received_at",
                ),
            ),
        ),
        Kind(
            "idempotency_keys",
            "idempotency keys of final refunds and charges",
            "IDEMPOTENCY_KEY_RETENTION_DAYS",
            (Table("key", "keys", expired_keys, "created_at"),),
        ),
        Kind(
            "rate_counters",
            "rate counters",
            None,
            # By key: a composite primary key would make SQLite's DELETE a chain of ORs
            # (its depth limit is 1000); every ended window of the batch's keys goes.
            (
                Table(
                    "rate counter",
                    "rate counters",
                    ended_rate_windows,
                    "window_ends_at",
                    by="key",
                ),
            ),
            rule="of windows that have ended",
        ),
        Kind(
            "login_records",
            "admin sign-in records",
            "LOGIN_RECORD_RETENTION_DAYS",
            (
                Table(
                    "failed sign-in count",
                    "failed sign-in counts",
                    expired_access_attempts,
                    "attempt_time",
                ),
                Table(
                    "access log", "access logs", _older(AccessLog, "attempt_time"), "attempt_time"
                ),
                Table(
                    "access failure",
                    "access failures",
                    _older(AccessFailureLog, "attempt_time"),
                    "attempt_time",
                ),
            ),
        ),
        Kind(
            "provider_requests",
            "simulated provider requests",
            "SIMULATED_PROVIDER_LOG_DAYS",
            (
                Table(
                    "request",
                    "requests",
                    _older(ProviderRequest, "created_at"),
                    "created_at",
                ),
            ),
        ),
    )
}


def retention_days(kind: str) -> int | None:
    """How many days `kind` is kept (its setting), or None when its own rule decides."""
    setting = KINDS[kind].setting
    return None if setting is None else int(getattr(settings, setting))


def batch_select(
    table: Table, expired: QuerySet[Any], cursor: Any, batch_size: int
) -> QuerySet[Any]:
    """One batch's SELECT: the oldest `batch_size` expired rows of `table` by its indexed
    column, from `cursor` on (`by` and that column of each). docs/operating/retention.md
    shows its plan on PostgreSQL."""
    if cursor is not None:
        expired = expired.filter(**{f"{table.order_by}__gte": cursor})
    return expired.order_by(table.order_by).values_list(table.by, table.order_by)[:batch_size]
