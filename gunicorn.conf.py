"""How the back office is served (`make run`, and the benchmark): see README, "Serving".

Threads, not one request per process: a request waiting on the payment provider holds a
thread, never the whole process, so admin pages and API reads keep their own threads.
And no request waits on the provider for long: past REFUND_INLINE_WAIT_SECONDS the
refund is answered `pending` while the process's send pool finishes it (see
ledger_app/services/dispatch/pool.py). Every setting can be overridden on the command
line or with GUNICORN_CMD_ARGS.
"""

import os

from backoffice.startup import settings_or_exit

# Refuse to start (one line, exit 2) before any worker boots when the settings cannot run.
settings_or_exit()

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
# Per process. A thread waits on the provider for at most the inline wait budget, so
# even with every send stuck on a dead provider the rest of the threads serve pages.
threads = int(os.environ.get("GUNICORN_THREADS", "32"))
timeout = 60
graceful_timeout = 30
