"""Named points where crash tests stop a process on purpose.

With LEDGER_FAULT_HANG_AT=<point> in its environment, a process that reaches that point
says so on stderr and hangs, so a test can SIGKILL it exactly there. Unset (always, in
production) a checkpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import sys
import time

ENV = "LEDGER_FAULT_HANG_AT"


def checkpoint(point: str) -> None:
    if os.environ.get(ENV) == point:
        sys.stderr.write(f"fault point reached: {point}\n")
        sys.stderr.flush()
        while True:  # until killed
            time.sleep(60)
