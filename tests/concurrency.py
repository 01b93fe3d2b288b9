"""Run calls at the same moment from real threads, one database connection each."""

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection

from tests import tally


def run_at_once(calls: Sequence[Callable[[], Any]], timeout: float = 60) -> list[Any]:
    """Run every call in its own thread, released together by a barrier.

    Returns each call's result, or the exception it raised, in the order given. Each
    thread opens its own connection before the barrier and closes it afterwards.
    """
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(index: int, call: Callable[[], Any]) -> None:
        try:
            connection.ensure_connection()
            barrier.wait(timeout=timeout)
            results[index] = call()
        except Exception as exc:  # the caller asserts on it
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    stuck = [t for t in threads if t.is_alive()]
    assert not stuck, f"{len(stuck)} threads did not finish in {timeout}s"
    tally.add("concurrency", operations=len(calls))
    return results
