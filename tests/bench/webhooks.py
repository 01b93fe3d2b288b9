"""The bench's webhook receiver and its deliver_webhooks workers (the webhooks phase,
phases_http.py): do deliveries keep up with the refunds the HTTP API makes?"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]


def _serve(port: int, latency_ms: int, ready) -> None:
    """Answer every POST 200 after `latency_ms`, as a receiver across a network does."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(latency_ms / 1000)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format, *args):  # http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    ready.set()
    server.serve_forever()


class HookReceiver:
    """The receiver in a process of its own (so it takes no CPU time from the bench's)."""

    def __init__(self, port: int, latency_ms: int) -> None:
        self.url = f"http://127.0.0.1:{port}/hooks"
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        self.process = ctx.Process(target=_serve, args=(port, latency_ms, ready), daemon=True)
        self.process.start()
        if not ready.wait(60):
            self.process.kill()
            raise RuntimeError("the webhook receiver did not start")

    def __enter__(self) -> HookReceiver:
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.join(10)


class Deliverer:
    """`manage.py deliver_webhooks --loop --threads N` on the bench's database, loopback
    receivers allowed; its line per delivery goes to a file in the work directory."""

    def __init__(self, url: str, threads: int, workdir: Path) -> None:
        self.log = (workdir / f"deliver-webhooks-{threads}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "deliver_webhooks", "--loop"]
            + ["--threads", str(threads), "--poll-seconds", "0.2"],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": url,
                "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
                "LOG_LEVEL": "WARNING",
            },
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> Deliverer:
        return self

    def __exit__(self, *exc) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self.log.close()


def database_now(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        now = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        assert now is not None
        return float(now[0])


def window_counts(url: str, endpoint: str, began: float, ended: float) -> dict:
    """Deliveries to `endpoint` made, and delivered, between two database times."""
    with psycopg.connect(url, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT count(*) FILTER (WHERE created_at BETWEEN to_timestamp(%(a)s) "
            "AND to_timestamp(%(b)s)), count(*) FILTER (WHERE delivered_at BETWEEN "
            "to_timestamp(%(a)s) AND to_timestamp(%(b)s)) FROM ledger_app_webhookdelivery "
            "WHERE endpoint_id = %(e)s",
            {"a": began, "b": ended, "e": endpoint},
        ).fetchone()
    assert counts is not None
    made, delivered = counts
    return {"made": made, "delivered": delivered}


def wait_caught_up(url: str, endpoint: str, timeout: float) -> tuple[float, dict]:
    """Seconds until no delivery to `endpoint` is pending (or `timeout`), and the
    deliveries by status then."""
    began = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            statuses: dict[str, int] = dict(
                conn.execute(
                    "SELECT status, count(*) FROM ledger_app_webhookdelivery "
                    "WHERE endpoint_id = %s GROUP BY status",
                    (endpoint,),
                ).fetchall()
            )
            waited = time.monotonic() - began
            if not statuses.get("pending") or waited > timeout:
                return waited, statuses
            time.sleep(0.1)


def disable_endpoint(url: str, endpoint: str) -> None:
    """The phases after this one make refunds with no delivery to write, as before it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE ledger_app_webhookendpoint SET status = 'disabled' WHERE id = %s",
            (endpoint,),
        )
