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

# Every checkpoint in the code, in the order a request passes them. The fault matrix
# kills a process at each; a test checks this list against the source.
REFUND_POINTS = (
    "refund.reserve_locked",  # charge locked, refund and ledger entry written, no commit
    "refund.reserved",  # reservation committed, nothing sent
    "refund.before_provider_call",
    "refund.after_provider_call",  # the provider acted; the ledger does not know
    "refund.settle_locked",  # settle transaction open, rows locked
    "refund.settled",  # settled and committed; the client not yet told
)
CHARGE_POINTS = (
    "charge.create_locked",
    "charge.created",
    "charge.before_provider_call",
    "charge.after_provider_call",
    "charge.settle_locked",
    "charge.settled",
)
PURGE_POINTS = (
    "purge.batch_committed",  # one batch deleted and committed, the lease still held
)
SYNC_POINTS = (
    "sync.window_committed",  # sync_provider: one window applied, its cursor committed
)
MAIL_POINTS = (
    "mail.sending",  # send_customer_mails: marked sending (committed), not yet handed over
    "mail.answered",  # the SMTP server answered (accepted it, say); the answer not recorded
)
POINTS = REFUND_POINTS + CHARGE_POINTS + PURGE_POINTS + SYNC_POINTS + MAIL_POINTS


def checkpoint(point: str) -> None:
    if os.environ.get(ENV) == point:
        sys.stderr.write(f"fault point reached: {point}\n")
        sys.stderr.flush()
        while True:  # until killed
            time.sleep(60)
