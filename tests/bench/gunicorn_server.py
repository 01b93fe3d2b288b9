"""The server under load: gunicorn started as `make run` starts it, and what it takes while
it serves (PostgreSQL connections, CPU by process).

Used by run.py's HTTP phases (phases_http.py). Nothing here knows how the service waits
for the provider or where its send pool is.
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parents[2]


def serving_model() -> dict:
    """Workers and threads as gunicorn.conf.py sets them in this environment."""
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    return {"workers": conf["workers"], "threads": conf["threads"]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Gunicorn:
    """`python -m gunicorn -c gunicorn.conf.py backoffice.wsgi --bind 127.0.0.1:<port>`,
    as `make run` serves, with the bench's database and dispatch settings."""

    def __init__(self, url: str, workdir: Path, *, dispatch: str, latency_ms: int = 0):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"gunicorn-{self.port}.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": url,
            "REFUND_DISPATCH": dispatch,
            "SIMULATED_GATEWAY_LATENCY_MS": str(latency_ms),
            "LEDGER_GATEWAY": "simulated",
            "API_RATE_LIMIT": "1000000/second",
            "LOG_LEVEL": "WARNING",
            # As docs/operating/configuration.md recommends for PostgreSQL: a process's
            # threads share a pool (REFUND_SEND_THREADS + 8) instead of keeping a connection each.
            "DATABASE_POOL_MAX_SIZE": os.environ.get("DATABASE_POOL_MAX_SIZE", "24"),
        }
        self.process: subprocess.Popen | None = None
        self.stop_seconds = 0.0

    @property
    def pid(self) -> int:
        """The master's process id, once started (inside the `with`)."""
        assert self.process is not None, "not started"
        return self.process.pid

    def __enter__(self) -> Gunicorn:
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "-c",
                    "gunicorn.conf.py",
                    "backoffice.wsgi",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{self.tail()}")
            try:
                if requests.get(f"{self.base}/admin/login/", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer within 60 s:\n{self.tail()}")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> float:
        """SIGTERM and wait: in-flight requests and the send pool's sends finish (gunicorn
        kills what is left after its graceful timeout). Seconds it took."""
        if self.process is None or self.process.poll() is not None:
            return self.stop_seconds
        began = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.stop_seconds = time.perf_counter() - began
        return self.stop_seconds

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class ConnectionWatch:
    """The most PostgreSQL client connections seen (every 0.2 s): to the bench database,
    and to the whole server (max_connections counts those)."""

    def __init__(self, server: dict, dbname: str):
        self.server, self.dbname = server, dbname
        self.peak_db = self.peak_server = 0
        self.max_connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ConnectionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _watch(self) -> None:
        with psycopg.connect(dbname="postgres", autocommit=True, **self.server) as conn:
            shown = conn.execute("SHOW max_connections").fetchone()
            assert shown is not None
            self.max_connections = int(shown[0])
            while True:
                counts = conn.execute(
                    "SELECT count(*) FILTER (WHERE datname = %s), count(*) "
                    "FROM pg_stat_activity WHERE backend_type = 'client backend'",
                    [self.dbname],
                ).fetchone()
                assert counts is not None
                db, total = counts
                self.peak_db, self.peak_server = max(self.peak_db, db), max(self.peak_server, total)
                if self._stop.wait(0.2):
                    return

    def figures(self) -> dict:
        return {
            "peak_db_connections": self.peak_db,
            "peak_server_connections": self.peak_server,
            "max_connections": self.max_connections,
        }


class CpuShare:
    """Where the CPU went over a window, in cores (Linux /proc; empty elsewhere): the
    whole machine, the gunicorn processes, PostgreSQL's backends of the bench database,
    and this (client) process. On a shared 2-core machine this says whether a figure was
    limited by CPU, and by whose."""

    TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self, gunicorn_pid: int, server: dict, dbname: str):
        self.gunicorn_pid, self.server, self.dbname = gunicorn_pid, server, dbname
        self._start: dict | None = None

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> dict:
        end = self._sample()
        if not self._start or not end:
            return {}
        start, wall = self._start, end["wall"] - self._start["wall"]

        def cores(before: dict, after: dict) -> float:
            return sum(t - before.get(pid, 0) for pid, t in after.items()) / self.TICK / wall

        shares = {
            "machine_busy_cores": (end["machine"][0] - start["machine"][0]) / self.TICK / wall,
            "machine_cores": os.cpu_count(),
            "gunicorn_cores": cores(start["gunicorn"], end["gunicorn"]),
            "postgres_cores": cores(start["postgres"], end["postgres"]),
            "client_cores": (end["client"] - start["client"]) / wall,
        }
        # Other processes on the machine: other runs disturbing this one show up here.
        shares["other_cores"] = max(
            0.0,
            shares["machine_busy_cores"]
            - shares["gunicorn_cores"]
            - shares["postgres_cores"]
            - shares["client_cores"],
        )
        return shares

    def _sample(self) -> dict:
        try:
            with open("/proc/stat") as stat:
                fields = [int(x) for x in stat.readline().split()[1:9]]  # not guest time
            idle = fields[3] + fields[4]  # idle + iowait
            with psycopg.connect(dbname="postgres", autocommit=True, **self.server) as conn:
                backends = [
                    row[0]
                    for row in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.dbname]
                    )
                ]
            return {
                "wall": time.perf_counter(),
                "machine": (sum(fields) - idle, idle),
                "gunicorn": {pid: _cpu_ticks(pid) for pid in _process_tree(self.gunicorn_pid)},
                "postgres": {pid: _cpu_ticks(pid) for pid in backends},
                "client": time.process_time(),
            }
        except OSError:
            return {}


def _cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def _process_tree(root: int) -> list[int]:
    """`root` and its children (gunicorn's master and workers)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == root:
                children.append(int(entry))
    return [root, *children]
