"""Reads shared by admin, API, commands and services: every query they filter by is
defined here once (the books' self-check is in `drift`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    When,
    Window,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, RowNumber
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from ledger_app import api_versions
from ledger_app.errors import ResourceMissing
from ledger_app.models import (
    ApiKey,
    Charge,
    Event,
    EventType,
    IdempotencyRecord,
    LedgerEntry,
    MovementStatus,
    Refund,
    RefundLimit,
    WebhookDelivery,
    WebhookEndpoint,
)
from ledger_app.selectors import compiled
from ledger_app.selectors.drift import Drift, find_ledger_drift
from ledger_app.text import has_unstorable_characters

__all__ = ["Drift", "find_ledger_drift"]


def idempotency_record(
    key: str, owner: str = IdempotencyRecord.BACK_OFFICE
) -> IdempotencyRecord | None:
    """The record for this key of this owner (an API key's label, or the back office's
    own keys by default), if any (every replay reads it: compiled once)."""
    found = compiled.run(_idempotency_record, key, owner)
    return found[0] if found else None


def _idempotency_record() -> QuerySet[IdempotencyRecord]:
    return IdempotencyRecord.objects.filter(owner=compiled.key(1), key=compiled.KEY).order_by()


def made_with(record: IdempotencyRecord) -> Refund | Charge:
    """The refund or charge a keyed request made, which its replay returns (compiled
    once, as the record is)."""
    if record.refund_id:
        found: list[Refund] | list[Charge] = compiled.run(_refund, record.refund_id)
    else:
        found = compiled.run(_charge, record.charge_id)
    if not found:  # pragma: no cover - a record's foreign key holds it
        raise Refund.DoesNotExist(f"idempotency key {record.key!r} has lost what it made")
    return found[0]


def _refund() -> QuerySet[Refund]:
    return Refund.objects.filter(pk=compiled.KEY).order_by()


def _charge() -> QuerySet[Charge]:
    return Charge.objects.filter(pk=compiled.KEY).order_by()


def earlier_refund_like(
    charge_id: str, amount: int, *, since: datetime, other_than_batch: str = ""
) -> Refund | None:
    """The newest live refund of this charge for exactly `amount` made since `since`, and
    not by the bulk run `other_than_batch` (a batch's own rows are not repeats of each
    other): what a second refund of the same amount would repeat. Declined and canceled
    refunds gave nothing back, so they are not counted. (Every bulk row and admin form
    asks, under its charge's lock: compiled once.)"""
    if other_than_batch:
        found = compiled.run(
            _earlier_refund_not_of_batch, charge_id, amount, since, other_than_batch
        )
    else:
        found = compiled.run(_earlier_refund, charge_id, amount, since)
    return found[0] if found else None


def _earlier_refund() -> QuerySet[Refund]:
    return _live_refunds_like().order_by("-created_at", "-id")[:1]


def _earlier_refund_not_of_batch() -> QuerySet[Refund]:
    not_of_batch = _live_refunds_like().exclude(batch_id=compiled.key(3))
    return not_of_batch.order_by("-created_at", "-id")[:1]


def _live_refunds_like() -> QuerySet[Refund]:
    return Refund.objects.filter(
        charge_id=compiled.KEY,
        amount=compiled.key(1, int),
        status__in=Refund.LIVE_STATUSES,
        created_at__gte=compiled.key(2, datetime),
    )


def charges_refunded_since(charge_ids: list[str], since: datetime) -> set[str]:
    """Which of these charges have a live refund made since `since` (the admin's bulk
    action warns about them before anything is refunded)."""
    return set(
        Refund.objects.filter(
            charge_id__in=charge_ids, status__in=Refund.LIVE_STATUSES, created_at__gte=since
        )
        .values_list("charge_id", flat=True)
        .distinct()
    )


def latest_charge_first(charges: QuerySet[Charge]) -> QuerySet[Charge]:
    """The rule for a PaymentIntent's latest charge, the one a refund of it refunds: its
    succeeded charge, else its newest (which the refund's checks then refuse)."""
    return charges.order_by(
        Case(When(status=Charge.Status.SUCCEEDED, then=0), default=1), "-created_at"
    )


def charge_of_payment_intent(payment_intent: str, using: str = "default") -> str | None:
    """The id of a PaymentIntent's latest charge (latest_charge_first); None when it has
    no charge here."""
    charges = Charge.objects.using(using).filter(payment_intent=payment_intent)
    return latest_charge_first(charges).values_list("pk", flat=True).first()


def latest_charges_of(payment_intents: set[str], using: str = "default") -> dict[str, Charge]:
    """Each PaymentIntent's latest charge (latest_charge_first), in one query for them
    all; a PaymentIntent with no charge here is left out."""
    latest: dict[str, Charge] = {}
    charges = Charge.objects.using(using).filter(payment_intent__in=payment_intents)
    for charge in latest_charge_first(charges):
        latest.setdefault(charge.payment_intent, charge)
    return latest


def charges_for_update() -> QuerySet[Charge]:
    """Charges to lock. Lock order everywhere: the idempotency key, then charges in
    primary-key order, then a charge's refunds."""
    return Charge.objects.order_by("pk").select_for_update(of=("self",))


def charge_for_update(pk: str) -> Charge | None:
    """One charge, locked for the rest of the caller's transaction (None: no such
    charge): charges_for_update().filter(pk=pk).first(), compiled once (`compiled`), as
    every refund takes this lock."""
    if connection.get_autocommit():
        raise TransactionManagementError("a charge is locked inside a transaction")
    found = compiled.run(_charge_for_update, pk)
    return found[0] if found else None


def _charge_for_update() -> QuerySet[Charge]:
    return charges_for_update().filter(pk=compiled.KEY)


def locked_refund(*, refund_id: str, charge_id: str) -> Refund:
    """The charge's refund, locked for the rest of the caller's transaction (take the
    charge's lock first: lock order). Every settle takes it: compiled once."""
    if connection.get_autocommit():
        raise TransactionManagementError("a refund is locked inside a transaction")
    found = compiled.run(_locked_refund, refund_id, charge_id)
    if not found:
        raise Refund.DoesNotExist(f"no refund {refund_id} of charge {charge_id}")
    return found[0]


def _locked_refund() -> QuerySet[Refund]:
    return Refund.objects.select_for_update().filter(pk=compiled.KEY, charge_id=compiled.key(1))


def refund_with_charge(refund_id: str) -> Refund:
    """A refund with its charge (what a send needs of both), from SQL compiled once: two
    prepared reads cost less than the ORM's join built for every send."""
    found = compiled.run(_refund, refund_id)
    if not found:
        raise Refund.DoesNotExist(f"no refund {refund_id}")
    refund = found[0]
    refund.charge = compiled.run(_charge, refund.charge_id)[0]  # its foreign key holds it
    return refund


def lease_free(now: datetime) -> Q:
    """Refunds or charges no sender holds: never leased, or the lease ran out."""
    return Q(leased_until__isnull=True) | Q(leased_until__lte=now)


def waiting_to_send(now: datetime) -> Q:
    """Pending refunds or charges no sender holds: what the worker sends next."""
    return Q(status=MovementStatus.PENDING) & lease_free(now)


def next_to_send(after: tuple[datetime, str] | None, size: int) -> list[tuple[datetime, str]]:
    """The worker's queue, one page at a time: (created_at, id) of the oldest pending
    refunds no sender holds, after the key `after` (keyset order, so one pass walks the
    queue once)."""
    queue = Refund.objects.filter(waiting_to_send(timezone.now()))
    if after is not None:
        queue = queue.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1]))
    return list(queue.order_by("created_at", "id").values_list("created_at", "id")[:size])


def in_doubt_ids(model: type[Refund] | type[Charge], lease_seconds: int | None) -> list[str]:
    """Ids of the refunds or charges the reconciler asks about, oldest first. Charges
    recorded here (imports, demo data) were never sent, so they are never in doubt."""
    candidates = model.objects.filter(in_doubt(lease_seconds=lease_seconds))
    if model is Charge:
        candidates = candidates.filter(provider_idempotency_key__isnull=False)
    return list(candidates.order_by("created_at", "id").values_list("pk", flat=True))


def purgeable_keys(
    *, older_than_days: int, now: datetime | None = None
) -> QuerySet[IdempotencyRecord]:
    """Keys older than that (before `now`, default the present) whose refund or charge is
    final. A key whose refund is pending, unknown or awaiting approval is kept: a retry
    with it must still replay, not refund again."""
    if older_than_days < 1:
        raise ValueError("older_than_days must be at least 1")
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    # What the key made (a record is bound to exactly one refund or one charge), read by
    # primary key for each key: purge_expired walks the keys by their created_at index in
    # batches, and a join or a hashed EXISTS would read every refund for each batch.
    made_status = Coalesce(
        Subquery(Refund.objects.filter(pk=OuterRef("refund_id")).order_by().values("status")),
        Subquery(Charge.objects.filter(pk=OuterRef("charge_id")).order_by().values("status")),
    )
    return (
        IdempotencyRecord.objects.filter(created_at__lt=cutoff)
        .alias(made_status=made_status)
        .filter(made_status__in=Refund.FINAL_STATUSES)
    )


def active_api_key(prefix: str) -> ApiKey | None:
    """The key with this prefix, unless it was revoked (every API request reads it: the
    query is compiled once, `compiled`)."""
    found = compiled.run(_active_api_key, prefix)
    return found[0] if found else None


def _active_api_key() -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(prefix=compiled.KEY, revoked_at__isnull=True).order_by("pk")[:1]


def api_key_limits(prefix: str) -> list[RefundLimit]:
    """The refund limits set on the API key with this prefix (every refund an API key makes
    reads them: compiled once)."""
    return compiled.run(_api_key_limits, prefix)


def _api_key_limits() -> QuerySet[RefundLimit]:
    return RefundLimit.objects.filter(api_key__prefix=compiled.KEY)


def live_endpoints() -> list[WebhookEndpoint]:
    """Webhook endpoints that receive events: the oldest WEBHOOK_ENDPOINTS_TOTAL of those
    enabled and not deleted (by created_at, then id). Every event is written once per
    endpoint here, in its change's transaction, so this bounds that work whatever the
    table holds: endpoints made before the limits existed, or past a setting lowered
    since, are sent nothing (`enabled_endpoints_past_the_limit`). Every refund reads
    them: the query is compiled once, `compiled`, with the limit as its parameter."""
    return compiled.run(_live_endpoints, settings.WEBHOOK_ENDPOINTS_TOTAL)


def _enabled_endpoints() -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(
        status=WebhookEndpoint.Status.ENABLED, deleted_at__isnull=True
    )


def _live_endpoints() -> QuerySet[WebhookEndpoint]:
    oldest_first = [F("created_at").asc(), F("id").asc()]
    place = Window(RowNumber(), order_by=oldest_first, output_field=BigIntegerField())
    return (
        _enabled_endpoints()
        .alias(place=place)
        .filter(place__lte=compiled.key(0, int))
        .order_by("created_at", "id")
    )


def receiving_endpoints() -> QuerySet[WebhookEndpoint]:
    """What `live_endpoints` reads, as a queryset (the admin marks the others)."""
    return _enabled_endpoints().order_by("created_at", "id")[: settings.WEBHOOK_ENDPOINTS_TOTAL]


def enabled_endpoints_past_the_limit() -> int:
    """How many enabled endpoints are sent no event, being past WEBHOOK_ENDPOINTS_TOTAL."""
    return max(0, _enabled_endpoints().count() - settings.WEBHOOK_ENDPOINTS_TOTAL)


def recently_succeeded(hours: int) -> list[str]:
    """Ids of refunds that succeeded (were last settled) within that many hours: the
    reconciler asks the provider again about these, in case a later failure's webhook
    never arrived. Not refunds an import recorded: the provider made those before they
    came here, and nothing here ever sent them."""
    since = timezone.now() - timedelta(hours=hours)
    succeeded = Refund.objects.filter(
        status=MovementStatus.SUCCEEDED, updated_at__gte=since
    ).exclude(source=Refund.Source.IMPORT)
    return list(succeeded.order_by("updated_at", "id").values_list("pk", flat=True))


def stale_pending(now: datetime | None = None, lease_seconds: int | None = None) -> Q:
    """Pending refunds or charges nobody is sending: a lease that ran out, or none taken
    within a lease's length of being created (a process died between commit and send)."""
    now = now or timezone.now()
    if lease_seconds is None:
        lease_seconds = settings.REFUND_DISPATCH_LEASE_SECONDS
    stale = now - timedelta(seconds=lease_seconds)
    return Q(status=MovementStatus.PENDING) & (
        Q(leased_until__lte=now) | Q(leased_until__isnull=True, created_at__lte=stale)
    )


def in_doubt(now: datetime | None = None, lease_seconds: int | None = None) -> Q:
    """Refunds or charges the reconciler asks the provider about: unknown, or pending with
    no sender."""
    return Q(status=MovementStatus.UNKNOWN) | stale_pending(now, lease_seconds)


def needing_attention(now: datetime | None = None) -> Q:
    """The support queue: refunds in doubt, and declines nobody has marked handled."""
    return in_doubt(now) | Q(status=Refund.Status.FAILED, handled_at__isnull=True)


def charge_state(charge_id: str) -> int:
    """A number that changes whenever the charge's books do: the id of its newest ledger
    entry (entries are append-only, one for every money-moving moment), 0 when none."""
    return charge_states([charge_id])[charge_id]


def charge_states(charge_ids: list[str]) -> dict[str, int]:
    """charge_state for many charges in one query."""
    newest = (
        LedgerEntry.objects.filter(charge_id__in=charge_ids)
        .order_by()
        .values("charge_id")
        .annotate(newest=Max("id"))
        .values_list("charge_id", "newest")
    )
    return {pk: 0 for pk in charge_ids} | dict(newest)


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

    Cursors compare (created_at, id), so a page does not shift when new objects are
    inserted while a client walks the list. The cursor is read from the database the
    queryset reads (the replica's list pages by the replica's rows).
    """
    model = queryset.model
    cursor_id = starting_after or ending_before
    if cursor_id is None:
        rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
        return Page(rows[:limit], len(rows) > limit)
    cursors = model.objects.using(queryset.db)
    cursor = cursors.filter(pk=cursor_id).values("created_at", "id").first()
    if cursor is None:
        param = "starting_after" if starting_after else "ending_before"
        raise ResourceMissing(f"No such {model._meta.model_name}: '{cursor_id}'", param=param)
    at, pk = cursor["created_at"], cursor["id"]
    if starting_after:
        older = queryset.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=pk))
        rows = list(older.order_by("-created_at", "-id")[: limit + 1])
        return Page(rows[:limit], len(rows) > limit)
    newer = queryset.filter(Q(created_at__gt=at) | Q(created_at=at, id__gt=pk))
    rows = list(newer.order_by("created_at", "id")[: limit + 1])
    return Page(list(reversed(rows[:limit])), len(rows) > limit)


def webhook_endpoints() -> QuerySet[WebhookEndpoint]:
    """Webhook endpoints the API lists and finds: all but the deleted."""
    return WebhookEndpoint.objects.filter(deleted_at__isnull=True)


def webhook_endpoint(endpoint_id: str) -> WebhookEndpoint | None:
    """The endpoint with this id, unless it was deleted."""
    return webhook_endpoints().filter(pk=endpoint_id).first()


def due_deliveries(now: datetime, due_at: datetime | None = None) -> QuerySet[WebhookDelivery]:
    """Deliveries a webhook worker may claim: pending, due by `due_at` (default now), held
    by no worker, to an endpoint that is enabled and not deleted. A disabled endpoint's
    deliveries wait; a deleted one's are canceled when it is deleted."""
    return WebhookDelivery.objects.filter(
        lease_free(now),
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at__lte=due_at or now,
        endpoint__status=WebhookEndpoint.Status.ENABLED,
        endpoint__deleted_at__isnull=True,
    )


def created_in(bounds: dict[str, int] | None) -> Q:
    """Stripe's `created` filter on created_at: {"eq", "gt", "gte", "lt" or "lte": unix
    seconds}. An object's `created` is its created_at in whole seconds, so created[gt]=T
    starts at T+1 and created=T is anything within second T."""
    condition = Q()
    for operator, seconds in (bounds or {}).items():
        start, end = _moment(seconds), _moment(seconds + 1)
        condition &= {
            "eq": Q(created_at__gte=start, created_at__lt=end),
            "gt": Q(created_at__gte=end),
            "gte": Q(created_at__gte=start),
            "lt": Q(created_at__lt=start),
            "lte": Q(created_at__lt=end),
        }[operator]
    return condition


def _moment(seconds: int) -> datetime:
    """Unix seconds as a datetime; past the last one a datetime holds, that last one."""
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return datetime.max.replace(tzinfo=UTC)


def events_listed(
    *,
    type_name: str | None = None,
    types: list[str] | None = None,
    created: dict[str, int] | None = None,
    version: str | None = None,
) -> QuerySet[Event]:
    """Events of a type (`charge.*`: every type under charge; `*`: all) or of any of
    `types`, created within `created` (see created_in), each with `pending_webhooks`: how
    many of its deliveries are still pending. Types are as the API `version` names them
    (api_versions.told_as): an older one calls some events otherwise, and is told none of
    some others."""
    events = Event.objects.filter(created_in(created)).annotate(
        pending_webhooks=Count(
            "deliveries", filter=Q(deliveries__status=WebhookDelivery.Status.PENDING)
        )
    )
    asked = [*(types or []), *([type_name] if type_name is not None else [])]
    if any(has_unstorable_characters(name) for name in asked):
        return events.none()  # no event has such a type (and PostgreSQL cannot compare it)

    def wanted(told: str) -> bool:
        if types is not None and told not in types:
            return False
        if type_name is None or type_name == "*":
            return True
        if type_name.endswith(".*"):
            return told.startswith(type_name[:-1])
        return told == type_name

    recorded = list(EventType.values)
    chosen = recorded if version is None else api_versions.recorded_types(version, recorded, wanted)
    if version is not None and chosen != recorded:
        return events.filter(type__in=chosen)
    if types is not None:
        events = events.filter(type__in=types)
    if type_name is not None and type_name != "*":
        if type_name.endswith(".*"):
            events = events.filter(type__startswith=type_name[:-1])
        else:
            events = events.filter(type=type_name)
    return events


def with_first_refunds(charges: list[Charge], count: int) -> list[Charge]:
    """The charges, each with its `count` newest refunds as `first_refunds` (and `count`
    as `first_refunds_count`), fetched in one query for them all."""
    newest = Refund.objects.order_by("-created_at", "-id")[:count]
    prefetch_related_objects(charges, Prefetch("refunds", queryset=newest, to_attr="first_refunds"))
    for charge in charges:
        charge.first_refunds_count = count  # type: ignore[attr-defined]  # read by the API's rendering
    return charges
