"""Catching up with the provider: `sync_provider` walks its charges, refunds, disputes,
balance transactions and payouts made since a stored cursor, through the gateway port's
list call, and applies each through the same code as its webhooks
(`events_in.apply_object`); a payout with the balance transactions the provider says it
paid out (the port's list_paid_out), kept by the books (`books_in`). What a lost webhook
would have told arrives this way; what was already applied changes nothing.

- One run at a time: the job lease `sync_provider` (operations/job_leases.py), renewed in
  each object's transaction, so an object commits only under a lease still held.
- In KINDS' order, so a refund finds its charge. Each kind is
  walked in windows of at most a day, oldest first; within a window the objects are applied
  oldest first, each in a transaction of its own. The kind's cursor
  (`ProviderSyncCursor.synced_until`) moves to a window's end once all of it is applied.
- Resumable: a run killed halfway leaves the cursor at the last whole window; the next run
  starts one PROVIDER_SYNC_INTERVAL before it (the overlap that also catches an object the
  provider listed late) and applies the rest; what the killed run applied is found again
  and changes nothing.
- Where it starts: `since` when given (a first run back-fills history with it; every
  kind's cursor is set there first, so a back-fill killed halfway goes on from where it
  was); else one interval before the cursor (payouts: PAYOUTS_FOLLOWED before it, so a
  payout's later status is read); with no cursor yet, one interval before now.
- `dry_run`: each object applied in a transaction rolled back: what it would do, object by
  object; the cursor stays.
- The provider cannot answer (OutcomeUnknown): the run stops there, the cursor where the
  last whole window left it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger_app import faults
from ledger_app.books.models import Payout
from ledger_app.mirror.books_in import apply_payout
from ledger_app.mirror.events_in import apply_object
from ledger_app.mirror.models import ProviderSyncCursor
from ledger_app.mirror.objects import Applied, is_id, text
from ledger_app.operations import job_leases
from ledger_app.provider.dispatch.send import Gateway, Listed, list_created, list_paid_out

JOB = "sync_provider"
LEASE_SECONDS = 300  # renewed with every object; a dead run's lease frees this soon after
WINDOW = timedelta(days=1)
# How far back payouts are listed again, so one's status is followed until it is final.
PAYOUTS_FOLLOWED = timedelta(days=7)
# A refund after its charge; a payout after the balance transactions it pays out.
KINDS: tuple[Listed, ...] = ("charge", "refund", "dispute", "balance_transaction", "payout")


class LeaseLost(Exception):
    """Another run took the job over (this one's lease ran out): this one stops."""


@dataclass
class SyncReport:
    busy: bool = False  # another run holds the job: this one did nothing
    read: Counter[str] = field(default_factory=Counter)  # objects read, by kind
    moved: int = 0  # objects that changed something (or would, in a dry run)
    ignored: int = 0

    def line(self, *, dry_run: bool) -> str:
        if self.busy:
            return "another sync_provider run is under way; nothing done"
        read = ", ".join(f"{self.read[kind]} {kind.replace('_', ' ')}s" for kind in KINDS)
        changed = "would change" if dry_run else "changed"
        return f"read {read}; {self.moved} {changed} something, {self.ignored} ignored"


def sync_provider(
    *,
    since: datetime | None = None,
    dry_run: bool = False,
    gateway: Gateway | None = None,
    on_applied: Callable[[Applied], None] = lambda applied: None,
    finished_before: datetime | None = None,
) -> SyncReport | None:
    """One run, by the rules above; `on_applied` sees each object's outcome. With
    `finished_before` (the worker's schedule), it runs only if no whole run finished since
    then, and returns None when it is not due."""
    lease = job_leases.claim_lease(name=JOB, seconds=LEASE_SECONDS, finished_before=finished_before)
    if lease is None:  # another run holds it, or (on the schedule) one finished lately
        return None if finished_before is not None else SyncReport(busy=True)
    report, finished = SyncReport(), False
    try:
        run = _Run(gateway, lease, dry_run, report, on_applied)
        # Whole seconds, as the provider's `created` counts: up to the end of this one.
        end = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
        if since is not None and not dry_run:  # a back-fill killed halfway goes on from here
            for kind in KINDS:
                ProviderSyncCursor.objects.update_or_create(
                    kind=kind, defaults={"synced_until": since}
                )
        for kind in KINDS:
            run.walk(kind, _start(kind, since, end), end)
        finished = True
    finally:
        job_leases.release_lease(lease, finished=finished and not dry_run)
    return report


def _start(kind: Listed, since: datetime | None, end: datetime) -> datetime:
    if since is not None:
        return since
    overlap = timedelta(seconds=settings.PROVIDER_SYNC_INTERVAL)
    if kind == "payout":  # a payout moves on after it is made (in transit, paid, failed)
        overlap = max(overlap, PAYOUTS_FOLLOWED)
    cursor = ProviderSyncCursor.objects.filter(kind=kind).first()
    return (cursor.synced_until if cursor else end) - overlap


@dataclass
class _Run:
    gateway: Gateway | None
    lease: job_leases.Lease
    dry_run: bool
    report: SyncReport
    on_applied: Callable[[Applied], None]

    def walk(self, kind: Listed, start: datetime, end: datetime) -> None:
        while start < end:
            until = min(start + WINDOW, end)
            listed = list_created(kind, start=start, end=until, gateway=self.gateway)
            objects = [obj for obj in listed if isinstance(obj, dict)]  # an object, or nothing
            self.report.ignored += len(listed) - len(objects)
            for obj in sorted(objects, key=_oldest_first):
                self.report.read[kind] += 1
                self._apply(obj, self._paid_out(obj) if kind == "payout" else None)
            if not self.dry_run:
                ProviderSyncCursor.objects.update_or_create(
                    kind=kind, defaults={"synced_until": until}
                )
                faults.checkpoint("sync.window_committed")
            start = until

    def _paid_out(self, payout: dict[str, Any]) -> list[Any]:
        """What the provider says the payout paid out, asked before its transaction; not
        asked again of a payout known in the status it is listed in."""
        payout_id = payout.get("id")
        if not is_id(payout_id):
            return []
        if Payout.objects.filter(pk=payout_id, status=text(payout.get("status"), 32)).exists():
            return []
        return list_paid_out(payout_id, gateway=self.gateway)

    def _apply(self, obj: dict[str, Any], paid: list[Any] | None) -> None:
        if self.dry_run:  # its transaction is rolled back: the renewal cannot be in it
            self._renew()
        with transaction.atomic(durable=True):
            if not self.dry_run:
                self._renew()
            applied = apply_payout(obj, paid) if paid is not None else apply_object(obj)
            if self.dry_run:
                transaction.set_rollback(True)
        self.report.moved += applied.moved
        self.report.ignored += applied.ignored
        self.on_applied(applied)

    def _renew(self) -> None:
        if not job_leases.renew_lease(self.lease):
            raise LeaseLost("another sync_provider run took the job over")


def _oldest_first(obj: dict[str, Any]) -> tuple[int, str]:
    created = obj.get("created")
    return (created if type(created) is int else 0, str(obj.get("id")))
