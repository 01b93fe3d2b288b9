"""Reads of refunds: a key's earlier refund, a refund under its charge's lock, the
refunds that recently succeeded, the support queue and a charge's newest refunds."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import (
    Prefetch,
    Q,
    QuerySet,
    prefetch_related_objects,
)
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from ledger_app.charges.models import Charge, MovementStatus
from ledger_app.charges.selectors import _charge
from ledger_app.compiled import precompiled
from ledger_app.leases import in_doubt
from ledger_app.refunds.models import Refund


@precompiled
def _refund(pk: str) -> QuerySet[Refund]:
    return Refund.objects.filter(pk=pk).order_by()


def earlier_refund_like(
    charge_id: str, amount: int, *, since: datetime, other_than_batch: str = ""
) -> Refund | None:
    """The newest live refund of this charge for exactly `amount` made since `since`, and
    not by the bulk run `other_than_batch` (a batch's own rows are not repeats of each
    other): what a second refund of the same amount would repeat. Declined and canceled
    refunds gave nothing back, so they are not counted. (Every bulk row and admin form
    asks, under its charge's lock: precompiled.)"""
    if other_than_batch:
        found = _earlier_refund_not_of_batch(charge_id, amount, since, other_than_batch)
    else:
        found = _earlier_refund(charge_id, amount, since)
    return found[0] if found else None


@precompiled
def _earlier_refund(charge_id: str, amount: int, since: datetime) -> QuerySet[Refund]:
    return _live_refunds_like(charge_id, amount, since).order_by("-created_at", "-id")[:1]


@precompiled
def _earlier_refund_not_of_batch(
    charge_id: str, amount: int, since: datetime, batch_id: str
) -> QuerySet[Refund]:
    not_of_batch = _live_refunds_like(charge_id, amount, since).exclude(batch_id=batch_id)
    return not_of_batch.order_by("-created_at", "-id")[:1]


def _live_refunds_like(charge_id: str, amount: int, since: datetime) -> QuerySet[Refund]:
    return Refund.objects.filter(
        charge_id=charge_id,
        amount=amount,
        status__in=Refund.LIVE_STATUSES,
        created_at__gte=since,
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


def locked_refund(*, refund_id: str, charge_id: str) -> Refund:
    """The charge's refund, locked for the rest of the caller's transaction (take the
    charge's lock first: lock order). Every settle takes it: precompiled."""
    if connection.get_autocommit():
        raise TransactionManagementError("a refund is locked inside a transaction")
    found = _locked_refund(refund_id, charge_id)
    if not found:
        raise Refund.DoesNotExist(f"no refund {refund_id} of charge {charge_id}")
    return found[0]


@precompiled
def _locked_refund(pk: str, charge_id: str) -> QuerySet[Refund]:
    return Refund.objects.select_for_update().filter(pk=pk, charge_id=charge_id)


def refund_with_charge(refund_id: str) -> Refund:
    """A refund with its charge (what a send needs of both), precompiled: two prepared
    reads cost less than the ORM's join built for every send."""
    found = _refund(refund_id)
    if not found:
        raise Refund.DoesNotExist(f"no refund {refund_id}")
    refund = found[0]
    refund.charge = _charge(refund.charge_id)[0]  # its foreign key holds it
    return refund


def recently_succeeded(hours: int) -> list[str]:
    """Ids of refunds that succeeded (were last settled) within that many hours: the
    reconciler asks the provider again about these, in case a later failure's webhook
    never arrived. Not refunds an import recorded: the provider made those before they
    came here, and nothing here ever sent them; nor refunds made at the provider, which
    its own events and sync_provider keep current."""
    since = timezone.now() - timedelta(hours=hours)
    succeeded = Refund.objects.filter(
        Refund.sent_here(), status=MovementStatus.SUCCEEDED, updated_at__gte=since
    )
    return list(succeeded.order_by("updated_at", "id").values_list("pk", flat=True))


def needing_attention(now: datetime | None = None) -> Q:
    """The support queue: refunds in doubt (those sent from here: one made at the
    provider waits on the provider's word), and declines nobody has marked handled."""
    return (in_doubt(now) & Refund.sent_here()) | Q(
        status=Refund.Status.FAILED, handled_at__isnull=True
    )


def with_first_refunds(charges: list[Charge], count: int) -> list[Charge]:
    """The charges, each with its `count` newest refunds as `first_refunds` (and `count`
    as `first_refunds_count`), fetched in one query for them all."""
    newest = Refund.objects.order_by("-created_at", "-id")[:count]
    prefetch_related_objects(charges, Prefetch("refunds", queryset=newest, to_attr="first_refunds"))
    for charge in charges:
        charge.first_refunds_count = count  # type: ignore[attr-defined]  # read by the API's rendering
    return charges
