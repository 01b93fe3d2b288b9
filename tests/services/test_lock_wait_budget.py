"""One refund's lock waits share DATABASE_LOCK_TIMEOUT_MS: a request queued behind one lock
and then another is refused within the setting, not within the setting per lock."""

from __future__ import annotations

import threading
import time
from zlib import crc32

import pytest
from django.db import connection, transaction

from ledger_app import errors
from ledger_app.approvals.limits import LOCK_SPACE
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, actor_label, create_refund
from tests.factories import ChargeFactory
from tests.services.people import set_limit, staff

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TIMEOUT_MS = 2_000
FIRST_HOLD = 0.6 * TIMEOUT_MS / 1000  # the requester's lock is let go after this
MARGIN = 0.6  # seconds: a correctness bound, not a speed target (without it: 0.6 s more)


class Holder(threading.Thread):
    """A transaction of its own that takes a lock, says so, and lets go when told to or
    after `hold` seconds."""

    def __init__(self, take, hold: float) -> None:
        super().__init__(daemon=True)
        self.take, self.hold = take, hold
        self.holding, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with transaction.atomic():
                self.take()
                self.holding.set()
                self.release.wait(self.hold)
                transaction.set_rollback(True)
        finally:
            connection.close()


def test_a_request_queued_behind_two_locks_is_refused_within_the_setting(
    settings, django_user_model
):
    settings.DATABASE_LOCK_TIMEOUT_MS = TIMEOUT_MS
    agent = staff(django_user_model, "agent")
    set_limit(user=agent, per_day=10**9)  # so the request takes the requester's lock
    charge = ChargeFactory(amount=10_000)

    def requester_lock():
        with connection.cursor() as cursor:
            label = actor_label(agent)
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)",
                [LOCK_SPACE, crc32(label.encode()) - 2**31],
            )

    def charge_lock():
        Charge.objects.select_for_update().get(pk=charge.pk)

    first = Holder(requester_lock, FIRST_HOLD)
    second = Holder(charge_lock, 30)
    for holder in (first, second):
        holder.start()
        assert holder.holding.wait(10)
    with connection.cursor() as cursor:  # the session's lock_timeout, as settings.py sets it
        cursor.execute(f"SET lock_timeout = {TIMEOUT_MS}")
    try:
        started = time.monotonic()
        with pytest.raises(errors.LockTimeout) as refused:
            create_refund(
                RefundRequest(charge_id=charge.id, amount=100, idempotency_key="k-q", actor=agent)
            )
        elapsed = time.monotonic() - started
    finally:
        for holder in (first, second):
            holder.release.set()
            holder.join(30)

    assert refused.value.code == "lock_timeout"
    assert FIRST_HOLD < elapsed < TIMEOUT_MS / 1000 + MARGIN, elapsed
    assert not Refund.objects.exists()
