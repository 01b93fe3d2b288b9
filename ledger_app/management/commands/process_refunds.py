"""The refund worker: claims pending refunds and sends each to the provider once.

The exit code sums up the run, for cron and supervisors:

    1  some refunds were interrupted by database errors (they are retried later)
    4  otherwise, some refunds ended unknown (amounts reserved; `reconcile` asks)
    3  otherwise, some refunds ended failed (the provider declined; amounts released)
    0  otherwise (no refund failed or ended unknown, or there was nothing to do)

Codes 3 and 4 are set only when run as a process (manage.py); call_command returns
normally and the summary line says the same. With --loop the codes sum up nothing (the
lines do): SIGTERM or SIGINT finishes the refund in hand and exits 0, or 128 + the signal
if that takes more than --stop-seconds or a second signal comes (see
docs/operating/deploys.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils import timezone

from ledger_app.approvals.services import expire_approvals
from ledger_app.books.services import close_books
from ledger_app.counts import count_of
from ledger_app.db import drop_broken_connection
from ledger_app.management.commands._output import UNSETTLED, ExitsByOutcome
from ledger_app.management.commands._polling import PollingWorker
from ledger_app.mirror.objects import Applied
from ledger_app.mirror.sync import LeaseLost, sync_provider
from ledger_app.operations.retention import Purged, purge_expired_if_due
from ledger_app.provider.dispatch import process_pending_refunds
from ledger_app.provider.dispatch.send import OutcomeUnknown
from ledger_app.provider.dispatch.worker import still_leased_refunds
from ledger_app.refunds.models import Refund
from ledger_app.worker_parts import RunOutcomes

log = logging.getLogger("ledger_app.retention")


class Command(PollingWorker, ExitsByOutcome):
    noun = "refund"
    plural = "refunds"
    left_in_hand = (
        "the attempt is on record, so when its lease runs out (REFUND_DISPATCH_LEASE_SECONDS) "
        "the worker or the reconciler looks it up before any resend"
    )
    lease_help = "How long a claim holds (default REFUND_DISPATCH_LEASE_SECONDS)."
    help = (
        "Send pending refunds to the payment provider through the one guarded send: each "
        "refund's lease is taken by one conditional UPDATE, so any number of workers on any "
        "number of machines can run side by side; each refund goes out with its own stored "
        "provider idempotency key, looked up first if an attempt may have reached the "
        "provider. Exit 1 when database errors interrupted some refunds, else 4 when some "
        "ended unknown (run "
        "`manage.py reconcile`), else 3 when some failed (the provider declined), else 0. "
        "With --loop it also runs purge_expired once a day (when a whole run last finished "
        "a day ago, as the database records it), in slices between passes, "
        "sync_provider every PROVIDER_SYNC_INTERVAL seconds, and close_books after a sync "
        "once a day."
    )
    # With --loop: how often this process asks whether the daily purge is due (a read), and
    # how long it waits after a database error in the purge before trying again.
    purge_check_seconds = 60.0
    purge_retry_seconds = 300.0

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if options["lease_seconds"] is not None and not 0 <= options["lease_seconds"] <= 604_800:
            raise CommandError("--lease-seconds must be 0 to 604800 (a week)", returncode=2)
        self._purge_check_at = 0.0  # time.monotonic(): ask at the first pass
        self._sync_check_at = 0.0
        total = self.run_passes(
            options, self._pass, on_refund=self._log_refund, purge_daily=options["loop"]
        )
        self.stdout.write(f"process_refunds: {total.summary()}")
        if options["loop"]:
            return  # a loop ends only when asked to: a clean stop is 0
        if total.errors:
            raise CommandError("some refunds were interrupted; they will be retried", returncode=1)
        for status in UNSETTLED:
            if total.statuses.get(status):
                self.report_unsettled(status, count_of(total.statuses[status], "refund"))

    def still_leased(self, pk: str | int) -> bool:
        return bool(still_leased_refunds([str(pk)]))  # a refund's id

    def _pass(self, *, purge_daily: bool, **kwargs: Any) -> RunOutcomes:
        """One pass: refunds whose approval ran out are canceled, then pending ones sent;
        with --loop, then a slice of the daily purge if it is due."""
        for refund_id in expire_approvals():
            self.stdout.write(f"{refund_id} canceled (not approved in time)")
        tally = process_pending_refunds(**kwargs)
        if purge_daily and time.monotonic() >= self._purge_check_at:
            self._purge_slice(kwargs["should_stop"])
        if purge_daily and time.monotonic() >= self._sync_check_at:
            self._sync_if_due()
        return tally

    def _sync_if_due(self) -> None:
        """sync_provider, when no whole run has finished within PROVIDER_SYNC_INTERVAL (as
        the database records it); a provider that cannot answer or a database error is
        logged and the sync asked about again later."""
        self._sync_check_at = time.monotonic() + self.purge_check_seconds
        due_after = timezone.now() - timedelta(seconds=settings.PROVIDER_SYNC_INTERVAL)
        try:
            report = sync_provider(finished_before=due_after, on_applied=self._log_synced)
        except DatabaseError:
            log.exception("sync_provider interrupted by a database error; tried again later")
            drop_broken_connection()
            return
        except (OutcomeUnknown, LeaseLost) as exc:
            log.warning("sync_provider stopped: %s; tried again later", exc)
            return
        except Exception:  # whatever the provider listed, refunds go on being sent
            log.exception("sync_provider failed; tried again later")
            return
        if report is not None:
            self.stdout.write(f"sync_provider: {report.line(dry_run=False)}")
            self._close_if_due()

    def _close_if_due(self) -> None:
        """close_books, after a sync, when no whole run has finished within a day (as the
        database records it); an error is logged and the close asked about after the next
        sync."""
        try:
            closed = close_books(finished_before=timezone.now() - timedelta(days=1))
        except DatabaseError:
            log.exception("close_books interrupted by a database error; tried again later")
            drop_broken_connection()
            return
        except Exception:
            log.exception("close_books failed; tried again later")
            return
        for one in closed or []:
            self.stdout.write(f"close_books: {one.line()}")

    def _log_synced(self, applied: Applied) -> None:
        if applied.moved:
            self.stdout.write(f"sync_provider: {applied.outcome}")

    def _purge_slice(self, should_stop: Callable[[], bool]) -> None:
        """A slice of the daily purge, if it is due; a database error is logged and the
        purge tried again later: refunds never wait on it."""
        try:
            result = purge_expired_if_due(should_stop=should_stop, on_kind=self._log_purged)
        except DatabaseError:
            log.exception("purge_expired interrupted by a database error; tried again later")
            drop_broken_connection()
            self._purge_check_at = time.monotonic() + self.purge_retry_seconds
            return
        unfinished = result is not None and result.ran and not result.finished
        # A slice that ran out of time goes on at the next pass; otherwise ask again later.
        self._purge_check_at = 0.0 if unfinished else time.monotonic() + self.purge_check_seconds

    def _log_purged(self, purged: Purged) -> None:
        self.stdout.write(f"purge_expired: {purged.line(dry_run=False)}")

    def _log_refund(self, refund: Refund) -> None:
        detail = f" ({refund.status_detail})" if refund.status_detail else ""
        self.stdout.write(
            f"{refund.id} {refund.status}{detail} {refund.amount} {refund.currency} "
            f"charge={refund.charge_id} key={refund.provider_idempotency_key}"
        )
