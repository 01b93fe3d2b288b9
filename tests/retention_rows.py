"""Rows of every kind purge_expired removes, dated as the retention tests need them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from ledger_app.models import (
    Charge,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    ProviderEvent,
    RateCounter,
    Refund,
    WebhookDelivery,
    WebhookEndpoint,
)
from simulated_provider.models import ProviderRequest

MARGIN = timedelta(minutes=1)  # either side of a retention's edge


def just_inside(days: int) -> datetime:
    """A moment a minute short of `days` ago: kept by a retention of `days`."""
    return timezone.now() - timedelta(days=days) + MARGIN


def just_outside(days: int) -> datetime:
    """A moment a minute past `days` ago: removed by a retention of `days`."""
    return timezone.now() - timedelta(days=days) - MARGIN


def dated(rows: QuerySet, field: str, moment: datetime) -> None:
    """Sets `field` of `rows` to `moment` (auto_now_add fields included: axes' times)."""
    rows.update(**{field: moment})


def provider_event(event_id: str, received_at: datetime) -> ProviderEvent:
    return ProviderEvent.objects.create(
        id=event_id, type="charge.updated", payload={"id": event_id}, received_at=received_at
    )


def sign_in_records(username: str, at: datetime) -> None:
    """One row in each of django-axes' tables for `username`, dated `at`."""
    common = {"user_agent": "test", "ip_address": "10.0.0.1", "username": username}
    common |= {"http_accept": "*/*", "path_info": "/admin/login/"}
    AccessAttempt.objects.create(**common, get_data="", post_data="", failures_since_start=1)
    AccessLog.objects.create(**common)
    AccessFailureLog.objects.create(**common)
    for model in (AccessAttempt, AccessLog, AccessFailureLog):
        dated(model.objects.filter(username=username), "attempt_time", at)


def provider_request(key: str, at: datetime) -> ProviderRequest:
    request = ProviderRequest.objects.create(
        operation="refund", idempotency_key=key, behaviour="succeed", outcome="succeeded"
    )
    dated(ProviderRequest.objects.filter(pk=request.pk), "created_at", at)
    return request


def rate_counter(key: str, ends_at: datetime) -> RateCounter:
    return RateCounter.objects.create(
        key=key, window_started_at=ends_at - timedelta(minutes=1), window_ends_at=ends_at, count=1
    )


def load_backlog(*, charges: int, old: datetime, new: datetime) -> None:
    """A loaded database, written in bulk and consistent for verify_ledger: `charges`
    succeeded charges, each refunded once (succeeded, with its key and ledger entries),
    four events each with one delivered webhook delivery, and as many rows again of every
    other kind; half of everything dated `old`, half `new`. Then ANALYZE, so the planner
    knows what it holds."""
    endpoint = WebhookEndpoint.objects.create(url="https://example.com/hook", secret="whsec_x")
    made = Charge.objects.bulk_create(
        Charge(
            id=f"ch_load{n:08d}",
            amount=1_000,
            amount_refunded=100,
            currency="usd",
            status="succeeded",
            created_at=old,
        )
        for n in range(charges)
    )
    refunds = Refund.objects.bulk_create(
        Refund(
            id=f"re_load{n:08d}",
            charge=charge,
            amount=100,
            currency="usd",
            status="succeeded",
            source="api",
            provider_idempotency_key=f"refund:re_load{n:08d}",
            created_at=old,
        )
        for n, charge in enumerate(made)
    )
    LedgerEntry.objects.bulk_create(
        entry
        for charge, refund in zip(made, refunds, strict=True)
        for entry in (
            LedgerEntry(
                charge=charge,
                kind="charge_succeeded",
                amount=1_000,
                refunded_delta=0,
                currency="usd",
            ),
            LedgerEntry(
                charge=charge,
                refund=refund,
                kind="refund_reserved",
                amount=100,
                refunded_delta=100,
                currency="usd",
            ),
            LedgerEntry(
                charge=charge,
                refund=refund,
                kind="refund_succeeded",
                amount=100,
                refunded_delta=0,
                currency="usd",
            ),
        )
    )
    moments = [old, new]
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            key=f"load-{n}",
            operation="refund.create",
            fingerprint="f",
            request_params={"charge": refund.charge_id, "amount": 100},
            refund=refund,
            created_at=moments[n % 2],
        )
        for n, refund in enumerate(refunds)
    )
    events = Event.objects.bulk_create(
        Event(
            id=f"evt_load{n:08d}",
            type="refund.updated",
            data_object={},
            charge=made[n // 4],
            refund=refunds[n // 4],
            created_at=moments[n % 2],
        )
        for n in range(4 * charges)
    )
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            event=event, endpoint=endpoint, status="delivered", created_at=event.created_at
        )
        for event in events
    )
    rows = 4 * charges
    ProviderEvent.objects.bulk_create(
        ProviderEvent(
            id=f"evt_prov{n:08d}", type="charge.updated", payload={}, received_at=moments[n % 2]
        )
        for n in range(rows)
    )
    ProviderRequest.objects.bulk_create(
        ProviderRequest(
            operation="refund",
            idempotency_key=f"k{n}",
            behaviour="succeed",
            outcome="succeeded",
            created_at=moments[n % 2],
        )
        for n in range(rows)
    )
    now = datetime.now(UTC)
    RateCounter.objects.bulk_create(
        RateCounter(
            key=f"load/{n}",
            window_started_at=now - timedelta(hours=2 - n % 4),
            window_ends_at=now + timedelta(hours=n % 4 - 1),
            count=1,
        )
        for n in range(rows)
    )
    common = {"user_agent": "load", "http_accept": "*/*", "path_info": "/admin/login/"}
    for model, extra in (
        (AccessAttempt, {"get_data": "", "post_data": "", "failures_since_start": 1}),
        (AccessLog, {}),
        (AccessFailureLog, {}),
    ):
        made_rows = model.objects.bulk_create(
            model(**common, **extra, ip_address=f"10.0.{n // 250}.{n % 250}", username=f"u{n}")
            for n in range(rows)
        )
        # attempt_time is auto_now_add: bulk_create wrote now; half of them are old
        dated(model.objects.filter(pk__in=[r.pk for r in made_rows[::2]]), "attempt_time", old)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
