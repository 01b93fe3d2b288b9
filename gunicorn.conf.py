"""How the back office is served (`make run`, and the benchmark): see docs/operating/serving.md.

Threads, not one request per process: a request waiting on the payment provider holds a
thread, never the whole process, so admin pages and API reads keep their own threads.
And no request waits on the provider for long: past REFUND_INLINE_WAIT_SECONDS the
refund is answered `pending` while the process's send pool finishes it (see
ledger_app/provider/dispatch/pool.py). Every setting can be overridden on the command
line or with GUNICORN_CMD_ARGS.
"""

import os
import sys

from backoffice.startup import settings_or_exit

# Refuse to start (one line, exit 2) before any worker boots when the settings cannot run.
settings_or_exit()

from django.conf import settings  # noqa: E402 - loaded, and checked, by settings_or_exit

bind = settings.GUNICORN_BIND
workers = settings.WEB_CONCURRENCY
worker_class = "gthread"
# Per process. A thread waits on the provider for at most the inline wait budget, so
# even with every send stuck on a dead provider the rest of the threads serve pages.
threads = settings.GUNICORN_THREADS
timeout = 60
# On SIGTERM the master closes the listening sockets and each worker stops accepting,
# answers the requests it holds (a kept-alive connection gets "Connection: close"), then
# worker_exit below; the master SIGKILLs what is left after this many seconds. A request
# waits on the provider at most REFUND_INLINE_WAIT_SECONDS and a send at most
# GATEWAY_TIMEOUT_SECONDS, so a stop takes seconds; 25 stays under an orchestrator's
# usual 30 s grace period (docs/operating/deploys.md).
graceful_timeout = 25

# The access log (off unless --access-logfile is given; `make run` gives it) names no
# credential: not the HTTP Basic user name (%(u)s: a client sending its API key the way
# `curl -u sk_...:` does would have the key written there), not the query string (%(r)s and
# %(q)s carry it, and a client may put anything there), not the Referer. What is left: the
# client address, time, method, path, protocol, status, bytes, milliseconds, the answer's
# Request-Id (the one the app's own log lines carry) and the user agent.
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(M)sms %({request-id}o)s "%(a)s"'
# One request, one line: the path as the client sent it (still percent-encoded: gunicorn's
# own %(U)s is decoded, and a %0a in it wrote a forged second line) and every value escaped
# as the app's own log lines are (serving/access_log.py).
logger_class = "serving.access_log.AccessLogger"

# Seconds a kept-alive connection may sit idle before gunicorn closes it. The nginx example
# keeps its connections to gunicorn idle for less (keepalive_timeout in its upstream block,
# deploy/nginx/backoffice.conf): were gunicorn the one to close, a request nginx sent on a
# connection at the moment gunicorn closed it would get a 502, and nginx retries no POST.
keepalive = 5


# Linux's prctl(2) option: "send me this signal when my parent dies" (<linux/prctl.h>).
PR_SET_PDEATHSIG = 1


def post_fork(server, worker):
    """A worker dies with its master. When the master is SIGKILLed (an OOM kill, a
    supervisor that signals only the main process), its workers would notice only at their
    next second's check and then stop gracefully, holding the listening socket for up to
    graceful_timeout, so a new master fails with "Connection in use". Linux sends the worker
    SIGKILL the moment its master is gone instead: what it was answering is cut off, as a
    crash of the master cuts it off anyway, and its sends in flight stay leased and counted
    for process_refunds (docs/operating/serving.md). A normal stop never sets it off: the
    master outlives its workers. Elsewhere than Linux, nothing changes."""
    _die_with_master(server.log, worker)


def post_worker_init(worker):
    """Again, once the worker has become --user/--group: Linux clears the parent-death
    signal when a process changes its user or group, which gunicorn does after post_fork."""
    _die_with_master(worker.log, worker)


def _die_with_master(log, worker) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning(
            "worker %s: prctl(PR_SET_PDEATHSIG) failed: %s",
            worker.pid,
            os.strerror(ctypes.get_errno()),
        )
    elif os.getppid() != worker.ppid:
        os._exit(1)  # the master died before the prctl: no signal will come


def when_ready(server):
    """The demo (DEBUG) says where it serves, from the sockets gunicorn has bound
    (GUNICORN_BIND, or --bind), so the addresses printed are the ones that answer."""
    from django.conf import settings

    if settings.DEBUG:
        for base in served_urls(listener.sock.getsockname() for listener in server.LISTENERS):
            print(
                f"Serving {base}/admin/ (Ctrl-C stops it)\n"
                f"  health: {base}/healthz  readiness: {base}/readyz  metrics: {base}/metrics",
                flush=True,
            )


def served_urls(addresses) -> list[str]:
    """http://host:port for each bound TCP address (a wildcard address as the loopback one
    a browser on this machine can open); a Unix socket as unix:path."""
    urls = []
    for address in addresses:
        if isinstance(address, str | bytes):
            urls.append(f"unix:{os.fsdecode(address)}")
            continue
        host, port = address[0], address[1]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104 - shown only
        urls.append(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
    return urls


def worker_exit(server, worker):
    """The worker's last requests are answered: sends queued in its send pool and not
    started are dropped, pending with no lease, for process_refunds to send at once; the
    ones running finish before the process exits (graceful_timeout bounds them)."""
    pool = sys.modules.get("ledger_app.provider.dispatch.pool")
    if worker.pid != os.getpid() or pool is None:
        return  # the master reaping a worker, or a worker that never sent a refund
    running, dropped = pool.stop_taking_sends()
    if running or dropped:
        server.log.info(
            "worker %s stopping: finishing %d sends in hand, %d queued left pending",
            worker.pid,
            running,
            dropped,
        )


# Prometheus multiprocess mode (docs/operating/metrics.md): with PROMETHEUS_MULTIPROC_DIR set,
# each worker keeps its counters in files there and /metrics adds them all up.
def on_starting(server):
    """Files left by an earlier run would be added to this run's counters: start empty."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".db"):
                os.remove(os.path.join(directory, name))


def child_exit(server, worker):
    """A dead worker's counters stay in the sum (counters never go down); its live gauges
    go. Called in the master for every worker that exits, crashed or stopped."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
