"""This process's clock, for tests that wait for time to pass. time-machine moves what
time.time(), datetime.now() and django.utils.timezone.now() answer in the test process and
its threads (ticking on from there: time still passes); time.monotonic() and time.sleep()
are left alone. It does not reach a server or a command a test starts, nor the database's
own now(): a test that waits for one of those waits for real."""

from __future__ import annotations

import time


def start_of_a_window(period_seconds: int, into: float = 1.0) -> float:
    """`into` seconds after the start of the next fixed window of `period_seconds`, aligned
    on the Unix epoch as the rate counters' windows are (ledger_app/operations/rate_counters.py).
    With the clock moved there (`time_machine.move_to(start_of_a_window(60), tick=True)`) every
    request of a test that takes less than the rest of the window falls into that window."""
    return (time.time() // period_seconds + 1) * period_seconds + into
