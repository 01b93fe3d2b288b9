"""Outbound webhooks, delivered: every pending WebhookDelivery (events/services.py writes
them with their change) goes to its endpoint, signed as Stripe signs, at least once.

A worker claims a batch of due deliveries in one short transaction (SKIP LOCKED on
PostgreSQL) and leases them; it then sends each with no transaction open and records
the outcome in one conditional UPDATE. On PostgreSQL a worker runs several lanes at once
(WEBHOOK_DELIVERY_THREADS threads), each claiming batches of its own as separate workers
would, so one process keeps several requests in flight. A worker that dies mid-send
leaves its lease, which runs out, and another sends the delivery again. Nothing here
holds a lock a refund needs, so a slow or dead receiver delays only other deliveries.
The endpoints themselves, and a delivery sent again on a person's word, are managed in
endpoints.py.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.utils import timezone

from ledger_app.db import release_connection
from ledger_app.events import egress
from ledger_app.events.models import Event, WebhookDelivery
from ledger_app.events.selectors import due_deliveries
from ledger_app.rendering.events import delivery_body
from ledger_app.worker_parts import ItemInHand, RunOutcomes, SharedHand

log = logging.getLogger("ledger_app.webhooks")

MAX_ERROR_LENGTH = 500
USER_AGENT = "refund-backoffice-webhooks/1"


# --- signing and rendering -------------------------------------------------------------


def signature_header(payload: str, secret: str, timestamp: int) -> str:
    """Stripe's Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.payload">."""
    signed = f"{timestamp}.{payload}".encode()
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def render(event: Event, version: str) -> str:
    """The delivery body: the event as the API shows it in the endpoint's API version
    (pending_webhooks as it is now)."""
    return delivery_body(event, version)


# --- delivery --------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt and what was recorded: `delivered`, `retrying` (due again at
    next_attempt_at), `refused` (nothing was sent: the URL or its address is not allowed,
    `error` says why; due again at next_attempt_at, in case that changes), `failed` (gave
    up), or `superseded` (its lease was lost: another worker or a resend took it; nothing
    recorded)."""

    delivery: WebhookDelivery
    outcome: str
    status_code: int | None
    error: str
    next_attempt_at: datetime | None = None


def backoff(attempts: int) -> timedelta:
    """How long after its `attempts`-th failure a delivery is tried again: the base,
    doubling, up to the maximum, give or take a tenth (so retries spread out)."""
    base = settings.WEBHOOK_BACKOFF_SECONDS
    delay = min(base * 2 ** min(attempts - 1, 30), settings.WEBHOOK_BACKOFF_MAX_SECONDS)
    return timedelta(seconds=delay * random.uniform(0.9, 1.1))  # noqa: S311 - jitter


def deliver_due(
    *,
    batch_size: int = 10,
    lease_seconds: int | None = None,
    threads: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_attempt: Callable[[Attempt], None] = lambda attempt: None,
    hand: ItemInHand | None = None,
) -> RunOutcomes:
    """Send every delivery due when the run starts, a claimed batch at a time. A delivery
    that fails is due again later, so one run tries each delivery at most once. Once
    `should_stop()`, the deliveries in hand are finished and the rest of each batch handed
    back.

    Up to `threads` lanes (default WEBHOOK_DELIVERY_THREADS) send at once, each claiming
    its own batches with SKIP LOCKED, as separate workers do, on a database connection of
    its own that it closes when the run ends; the others start only when the first claim
    comes back full (there is a backlog), and only where SKIP LOCKED exists (not SQLite:
    one lane there). `on_attempt` is called from one lane at a time.

    A lane that raises (a bug, a broken pipe in `on_attempt`) stops the run: every other
    lane finishes the delivery in hand, hands the rest of its batch back and takes no new
    one, and the error is raised here once they have. A batch never started is handed
    back too."""
    run = _Run(
        due_at=timezone.now(),
        batch_size=batch_size,
        lease_seconds=lease_seconds or settings.WEBHOOK_LEASE_SECONDS,
        should_stop=should_stop,
        on_attempt=on_attempt,
        hand=SharedHand(hand or ItemInHand()),
    )
    tally = RunOutcomes()
    try:
        run.run_lanes(tally, threads or settings.WEBHOOK_DELIVERY_THREADS)
    finally:
        run.join_helpers(tally)
    if run.crashed:
        raise run.crashed[0]
    return tally


Claimed = tuple[datetime, list[WebhookDelivery]]


@dataclass
class _Run:
    """What the lanes of one deliver_due share: the moment that decides what is due, how
    they claim, when to stop (asked by the caller, or `halt`: a lane crashed), and the
    worker's hand (which sees every lane's items)."""

    due_at: datetime
    batch_size: int
    lease_seconds: int
    should_stop: Callable[[], bool]
    on_attempt: Callable[[Attempt], None]
    hand: SharedHand

    def __post_init__(self) -> None:
        self._said = threading.Lock()
        self.crashed: list[BaseException] = []
        self.halt = threading.Event()
        self.helpers: list[tuple[threading.Thread, RunOutcomes]] = []

    def run_lanes(self, tally: RunOutcomes, lanes: int) -> None:
        """This thread's lane, and `lanes` - 1 helper lanes beside it once the first claim
        comes back full (a backlog), where SKIP LOCKED exists. If this lane raises, the
        helpers take nothing new and a batch claimed but never started is handed back."""
        first = self.claim_next(tally)
        if not connection.features.has_select_for_update_skip_locked:
            lanes = 1  # SQLite: one writer at a time, and claims that would wait on each other
        try:
            if first is not None and len(first[1]) >= self.batch_size:
                self.start_helpers(lanes - 1)
            claimed, first = first, None
            self.lane(tally, claimed)
        except BaseException:
            self.halt.set()  # the other lanes take nothing new
            if first is not None:  # claimed, never started: free again at once
                _hand_back(first[1], first[0], tally)
            raise

    def start_helpers(self, count: int) -> None:
        """`count` helper lanes, each in a thread of its own with a tally of its own."""
        for number in range(1, count + 1):
            helper_tally = RunOutcomes()
            helper = threading.Thread(
                target=self.helper_lane, args=(helper_tally,), name=f"deliver-{number}"
            )
            helper.start()
            self.helpers.append((helper, helper_tally))

    def join_helpers(self, tally: RunOutcomes) -> None:
        """Wait for every helper lane to end, and add what each did to `tally`."""
        for helper, _ in self.helpers:
            helper.join()
        for _, helper_tally in self.helpers:
            tally.add_up(helper_tally)

    def stopping(self) -> bool:
        return self.halt.is_set() or self.should_stop()

    def claim_next(self, tally: RunOutcomes) -> Claimed | None:
        """The next batch this lane leases; None when nothing is due, stopped, or the
        database failed (counted)."""
        if self.stopping():
            return None
        try:
            lease, batch = claim(
                due_at=self.due_at, size=self.batch_size, lease_seconds=self.lease_seconds
            )
        except DatabaseError:
            tally.survive_database_error("claiming webhook deliveries")
            return None
        return (lease, batch) if batch else None

    def lane(self, tally: RunOutcomes, claimed: Claimed | None = None) -> None:
        """Send batch after batch until nothing due is left or a stop is asked for."""
        if claimed is None:
            claimed = self.claim_next(tally)
        while claimed is not None:
            lease, batch = claimed
            self.send_batch(batch, lease, tally)
            claimed = self.claim_next(tally)

    def send_batch(self, batch: list[WebhookDelivery], lease: datetime, tally: RunOutcomes) -> None:
        """Send each while the lease leaves time for a whole request (WEBHOOK_TIMEOUT_SECONDS,
        which egress.post holds it to) and for rendering and recording it; hand the rest
        back, also when something raises (the one in hand then stays leased)."""
        unsent = list(batch)
        need = settings.WEBHOOK_TIMEOUT_SECONDS + SEND_MARGIN_SECONDS
        try:
            while unsent and not self.stopping() and _lease_left(lease) > need:
                delivery = unsent.pop(0)
                try:
                    with self.hand.holding(delivery.pk):
                        attempt = _send_or_record_failure(delivery, lease)
                except DatabaseError:
                    tally.survive_database_error(f"webhook delivery {delivery.pk}")
                    continue
                tally.add(attempt.outcome)
                self.said(attempt)
        finally:
            _hand_back(unsent, lease, tally)

    def helper_lane(self, tally: RunOutcomes) -> None:
        """A lane in a thread of its own: its own connection, closed (or given back to
        the pool) when it ends; what it cannot survive is raised in the caller's thread."""
        try:
            self.lane(tally)
        except BaseException as exc:
            self.halt.set()  # the other lanes take nothing new
            log.exception("a webhook delivery lane stopped")
            self.crashed.append(exc)
        finally:
            connection.close()

    def said(self, attempt: Attempt) -> None:
        with self._said:
            self.on_attempt(attempt)


def claim(
    *, due_at: datetime, size: int, lease_seconds: int
) -> tuple[datetime, list[WebhookDelivery]]:
    """Lease up to `size` due deliveries, oldest due first, in one short transaction;
    rows another worker is claiming are skipped, not waited for."""
    now = timezone.now()
    lease = now + timedelta(seconds=lease_seconds)
    with transaction.atomic(durable=True):
        ids = list(
            due_deliveries(now, due_at)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("next_attempt_at", "id")
            .values_list("pk", flat=True)[:size]
        )
        WebhookDelivery.objects.filter(pk__in=ids).update(leased_until=lease)
    batch = WebhookDelivery.objects.filter(pk__in=ids).select_related("event", "endpoint")
    return lease, list(batch.order_by("next_attempt_at", "id"))


# Besides one whole request, a send needs this long under its lease: rendering the body
# before it, recording the outcome after. WEBHOOK_LEASE_MARGIN_SECONDS (settings) leaves
# room for it and for the claim.
SEND_MARGIN_SECONDS = 0.5


def _hand_back(unsent: list[WebhookDelivery], lease: datetime, tally: RunOutcomes) -> None:
    if not unsent:
        return
    try:
        tally.handed_back += _release(unsent, lease)
    except DatabaseError:
        tally.survive_database_error("handing back webhook deliveries")
        tally.left_leased += len(unsent)


def _send_or_record_failure(delivery: WebhookDelivery, lease: datetime) -> Attempt:
    """send(), except that a bug while preparing one delivery is recorded on it as a failed
    attempt (retried after backoff), so one bad delivery never stops the others."""
    try:
        return send(delivery, lease)
    except DatabaseError:
        raise
    except Exception as exc:
        log.exception("webhook delivery %s could not be sent", delivery.pk)
        return record(delivery, lease, None, f"not sent: internal error ({type(exc).__name__})")


def _lease_left(lease: datetime) -> float:
    return (lease - timezone.now()).total_seconds()


def _release(deliveries: list[WebhookDelivery], lease: datetime) -> int:
    """Claimed, not sent: free again at once (unless another worker has them by now)."""
    return WebhookDelivery.objects.filter(
        pk__in=[d.pk for d in deliveries], leased_until=lease
    ).update(leased_until=None)


def send(delivery: WebhookDelivery, lease: datetime) -> Attempt:
    """POST the event to the endpoint, signed, and record what happened. egress.post
    checks the URL again first: what a host resolves to may have changed since it was saved."""
    endpoint = delivery.endpoint
    body = render(delivery.event, endpoint.api_version)
    release_connection()  # with DATABASE_POOL_MAX_SIZE, a lane waiting on a receiver holds none
    status_code, error = post(endpoint.url, body, endpoint.secret)
    return record(delivery, lease, status_code, error)


def post(url: str, payload: str, secret: str) -> tuple[int | None, str]:
    """(HTTP status, "") when the receiver answered 2xx; (status or None, what went
    wrong) otherwise: the status and a short excerpt of the answer, the reason a URL was
    refused, or why no answer came. Redirects are not followed."""
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "Stripe-Signature": signature_header(payload, secret, int(time.time())),
        "User-Agent": USER_AGENT,
    }
    try:
        answer = egress.post(url, payload.encode(), headers, settings.WEBHOOK_TIMEOUT_SECONDS)
    except egress.Refused as refused:
        return None, f"{REFUSED}{refused.reason}"
    except egress.NoAnswer as missing:
        return None, missing.reason
    if 200 <= answer.status < 300:
        return answer.status, ""
    return answer.status, _snippet(answer)


def _snippet(answer: egress.Answer) -> str:
    """The status and, clearly labelled, the first bytes the receiver sent: enough for
    support to tell a 404 page from a crash, never a whole internal answer."""
    if not answer.excerpt:
        return f"HTTP {answer.status}"
    return (
        f"HTTP {answer.status}; receiver said (first {egress.EXCERPT_BYTES} bytes, escaped): "
        + egress.escaped(answer.excerpt)
    )


REFUSED = "refused: "  # how `post` starts the error of a delivery it did not send


def _retry_outcome(error: str) -> str:
    return "refused" if error.startswith(REFUSED) else "retrying"


def record(
    delivery: WebhookDelivery, lease: datetime, status_code: int | None, error: str
) -> Attempt:
    """The outcome, in one UPDATE that applies only while this worker still holds the
    delivery (still pending under its lease): 2xx is delivered; anything else is tried
    again after backoff, or failed once the delivery is older than the retry window."""
    now = timezone.now()
    fields: dict[str, Any] = {"attempts": F("attempts") + 1, "last_status_code": status_code}
    fields["leased_until"] = None
    next_at = None
    outcome: str
    if not error:
        outcome = WebhookDelivery.Status.DELIVERED
        fields.update(status=outcome, delivered_at=now, last_error="")
    else:
        window = timedelta(hours=settings.WEBHOOK_RETRY_HOURS)
        gave_up = now - delivery.created_at >= window
        outcome = WebhookDelivery.Status.FAILED if gave_up else _retry_outcome(error)
        next_at = now + backoff(delivery.attempts + 1)
        fields.update(last_error=error[:MAX_ERROR_LENGTH], next_attempt_at=next_at)
        fields["status"] = outcome if gave_up else WebhookDelivery.Status.PENDING
    mine = WebhookDelivery.objects.filter(
        pk=delivery.pk, status=WebhookDelivery.Status.PENDING, leased_until=lease
    )
    if not mine.update(**fields):
        outcome = "superseded"
    return Attempt(delivery, str(outcome), status_code, error, next_at)
