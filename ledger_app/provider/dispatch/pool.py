"""Inline dispatch with a wait budget: the web tier never waits on the provider for long.

After a reserve commits, inline mode hands the send to this process's send pool (a few
threads, REFUND_SEND_THREADS) and waits for it at most REFUND_INLINE_WAIT_SECONDS. A
provider that answers in time gives the caller the settled refund, as before. One that is
slow or down leaves the caller with the refund as it stands, `pending` (Stripe answers
`pending` refunds the same way), while the pool thread keeps going and settles it; the
request thread is free at once for the next page. When every pool thread is busy and
the backlog is full, or the pool takes no more work because the process is stopping,
nothing more is queued: the refund stays pending, with no lease and no attempt, for
`process_refunds`.

Nothing here decides whether to send: the pool calls the same guarded send
(`send_refund` / `send_charge`), which takes the lease and records the attempt itself, so
a pool thread, the worker and the reconciler can race for one refund and only one sends.
If the process dies with sends queued or in flight, the refunds are pending in the
database and the worker finishes them (asking the provider first where an attempt was
recorded). With a budget of 0 the caller sends in its own thread and waits for the
answer, which tests use (their data is in a transaction other threads cannot see).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitedLongEnough
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from ledger_app.db import release_connection
from ledger_app.provider.dispatch.send import Movement, Sent

log = logging.getLogger("ledger_app.dispatch")

BACKLOG_PER_THREAD = 4  # queued sends per pool thread before new ones go to the worker

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_threads = 0  # the size _executor was made with
_queued = 0  # submitted and not yet finished, in this process


def send_within_budget(
    send: Callable[[str], Sent[Movement]], pk: str, fallback: Movement
) -> Movement:
    """Run `send(pk)` (send_refund or send_charge) and return the item it settled, or
    `fallback` (the item as the caller has it, pending) when the budget ran out first or
    the pool had no room. Exceptions of the send reach the caller only when it waited."""
    budget = settings.REFUND_INLINE_WAIT_SECONDS
    if budget <= 0:
        return send(pk).item
    future = _submit(send, pk)
    if future is None:  # full, or shut down: nothing queued
        return fallback
    release_connection()  # a waiting request holds no database connection
    try:
        return future.result(timeout=budget)
    except WaitedLongEnough:
        log.info("%s: provider slower than %.1f s; answered pending, still sending", pk, budget)
        return fallback


def _submit(send: Callable[[str], Sent[Movement]], pk: str) -> Future[Movement] | None:
    global _executor, _threads, _queued
    threads = settings.REFUND_SEND_THREADS
    with _lock:
        if _queued >= threads * (1 + BACKLOG_PER_THREAD):
            log.warning("send pool full: %s left pending for the worker", pk)
            return None
        if _executor is None or _threads != threads:  # made lazily, in each web process
            _executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="send")
            _threads = threads
        _queued += 1
        executor = _executor
    # In a copy of the request's context: the settle's events name the request (its
    # Request-Id and the refund's Idempotency-Key) and its log lines carry the request id.
    try:
        future = executor.submit(contextvars.copy_context().run, _run, send, pk)
    except RuntimeError:
        # The pool takes no more work: stop_taking_sends shut it down (the process is
        # stopping), or the interpreter is shutting down ("cannot schedule new futures
        # after interpreter shutdown"). The reserve has committed, so this is the pool-full
        # case: the refund stays pending, with no lease and no attempt, for the worker.
        with _lock:
            _queued -= 1
        log.warning("send pool shut down: %s left pending for the worker", pk)
        return None
    future.add_done_callback(_finished)
    return future


def _run(send: Callable[[str], Sent[Movement]], pk: str) -> Movement:
    try:
        return send(pk).item
    except Exception:
        # The refund is reserved and stays pending or unknown; the worker or the
        # reconciler takes it from here. The caller may be long gone, so log it here.
        log.exception("%s: send in the pool failed; the worker will retry it", pk)
        raise
    finally:
        close_old_connections()  # pooled: back to the pool; persistent: kept while usable


def _finished(_future: Future[Any]) -> None:
    global _queued
    with _lock:
        _queued -= 1


def in_flight() -> int:
    """Sends submitted in this process and not finished (for tests and metrics)."""
    with _lock:
        return _queued


def stop_taking_sends() -> tuple[int, int]:
    """The web process is stopping (gunicorn's worker_exit, after its last request): the
    sends queued and not started are dropped, so their refunds stay pending with no lease
    and no attempt, which `process_refunds` sends at once; the sends running finish (each
    within GATEWAY_TIMEOUT_SECONDS; the interpreter waits for them before the process
    exits, and gunicorn's graceful timeout bounds it). (running, dropped)."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
        queued = _queued
    if executor is None:
        return 0, 0
    dropped = executor._work_queue.qsize()  # not started yet; cancel_futures drops them
    executor.shutdown(wait=False, cancel_futures=True)
    return max(queued - dropped, 0), dropped
