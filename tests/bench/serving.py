"""The serving model under load: gunicorn started as `make run` starts it, driven over HTTP.

Used by run.py. Nothing here knows how the service waits for the provider or where its
send pool is: only what a client sees (status codes, each refund's `status`, latency),
plus how many database connections the server holds while it serves.
"""

from __future__ import annotations

import math
import os
import random
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parents[2]
REFUNDS_CHANGELIST = "/admin/ledger_app/refund/"


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
            self.max_connections = int(conn.execute("SHOW max_connections").fetchone()[0])
            while True:
                db, total = conn.execute(
                    "SELECT count(*) FILTER (WHERE datname = %s), count(*) "
                    "FROM pg_stat_activity WHERE backend_type = 'client backend'",
                    [self.dbname],
                ).fetchone()
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


@dataclass(frozen=True)
class Call:
    began: float
    ended: float
    status_code: int  # 0: no answer (an exception; see refund_status)
    refund_status: str

    @property
    def seconds(self) -> float:
        return self.ended - self.began


class RefundLoad:
    """`clients` threads, each with its own requests.Session, posting `POST /v1/refunds`
    (amount 1, a fresh Idempotency-Key) on one of `charges` back to back until stopped:
    a closed loop, so exactly `clients` requests are in flight all along. The clients
    start spread over `stagger` seconds, so they do not all post at the same moment
    (clients started together stay in step, and then every refund lands in one burst)."""

    def __init__(self, base: str, key: str, charges: list[str], clients: int, stagger: float = 0.0):
        self.base, self.key, self.charges, self.clients = base, key, charges, clients
        self.stagger = stagger
        self.calls: list[Call] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n * stagger / clients,), daemon=True)
            for n in range(clients)
        ]

    def __enter__(self) -> RefundLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def stop(self) -> None:
        """Stop sending; wait for the answers to the requests in flight."""
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _client(self, delay: float) -> None:
        rng = random.Random()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.key}"
        self._stop.wait(delay)
        while not self._stop.is_set():
            with self._lock:
                self._in_flight += 1
            began = time.perf_counter()
            try:
                response = session.post(
                    f"{self.base}/v1/refunds",
                    data={"charge": rng.choice(self.charges), "amount": "1"},
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                    timeout=120,
                )
                code = response.status_code
                state = response.json().get("status", "?") if code == 200 else ""
            except (requests.RequestException, ValueError) as exc:
                code, state = 0, type(exc).__name__
            ended = time.perf_counter()
            with self._lock:
                self._in_flight -= 1
            self.calls.append(Call(began, ended, code, state))

    def ended_between(self, start: float, end: float) -> list[Call]:
        return [call for call in self.calls if start <= call.ended < end]


def outcomes(calls: list[Call]) -> dict:
    """Answers by refund status (200s) and by status code (the rest)."""
    counts: dict[str, int] = {}
    for call in calls:
        label = call.refund_status if call.status_code == 200 else f"http_{call.status_code}"
        counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items()))


def percentile_ms(seconds: list[float], fraction: float) -> float:
    """Nearest-rank percentile, in ms (p99 of 100 samples is the 99th, not the largest)."""
    if not seconds:
        return 0.0
    ordered = sorted(seconds)
    rank = min(len(ordered), max(1, math.ceil(len(ordered) * fraction - 1e-9)))
    return ordered[rank - 1] * 1000


def inline_slow_provider(
    base: str,
    key: str,
    charges: list[str],
    cpu: CpuShare,
    *,
    clients: int,
    warm: float,
    seconds: float,
) -> dict:
    """Throughput and latency of `clients` back-to-back refund posts on charges whose
    provider answers slowly, over a window of `seconds` after `warm` seconds of the same
    load. Also where the CPU went, to show what limits the rate (the client is not)."""
    with RefundLoad(base, key, charges, clients, stagger=warm / 2) as load:
        time.sleep(warm)
        cpu.start()
        start = time.perf_counter()
        time.sleep(seconds)
        end, used = time.perf_counter(), cpu.stop()
    window = load.ended_between(start, end)
    latencies = [call.seconds for call in window]
    rate = len(window) / (end - start)
    mean = sum(latencies) / len(latencies) if latencies else 0.0
    non_200 = sum(1 for call in window if call.status_code != 200)
    return {
        "clients": clients,
        "per_second": rate,
        "p50_ms": percentile_ms(latencies, 0.50),
        "p99_ms": percentile_ms(latencies, 0.99),
        "mean_ms": mean * 1000,
        # Little's law: rate x mean latency = requests in flight. Near `clients` means the
        # clients kept every request slot busy (no client-side gap between requests).
        "in_flight_littles_law": rate * mean,
        "outcomes": outcomes(window),
        "non_200": non_200,
        "non_200_whole_run": sum(1 for call in load.calls if call.status_code != 200),
        "cpu_cores": used,
        # CPU per refund answered: the web tier's, and PostgreSQL's for this database.
        "gunicorn_cpu_ms_per_refund": used.get("gunicorn_cores", 0) / rate * 1000 if rate else 0,
        "postgres_cpu_ms_per_refund": used.get("postgres_cores", 0) / rate * 1000 if rate else 0,
    }


def create_superuser(url: str) -> tuple[str, str]:
    username, password = "bench-admin", uuid.uuid4().hex
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "createsuperuser",
            "--noinput",
            "--username",
            username,
            "--email",
            "bench-admin@example.com",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SUPERUSER_PASSWORD": password},
        check=True,
        capture_output=True,
    )
    return username, password


def admin_session(base: str, username: str, password: str) -> requests.Session:
    """A session logged in through the admin's login form, as a person would."""
    session = requests.Session()
    form = session.get(f"{base}/admin/login/", timeout=30)
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    token = found.group(1) if found else session.cookies.get("csrftoken", "")
    answer = session.post(
        f"{base}/admin/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": token,
            "next": "/admin/",
        },
        headers={"Referer": f"{base}/admin/login/"},
        timeout=30,
    )
    if answer.status_code != 200 or "/login/" in answer.url:
        raise RuntimeError(f"admin login failed: {answer.status_code} {answer.url}")
    return session


def changelist_gets(session: requests.Session, base: str, count: int, load=None):
    """`count` GETs of the refunds changelist, one after another: their latencies, the
    failures (not 200, or sent to the login page), and the requests in flight at each."""
    latencies, failures, in_flight = [], 0, []
    for _ in range(count):
        if load is not None:
            in_flight.append(load.in_flight)
        began = time.perf_counter()
        response = session.get(f"{base}{REFUNDS_CHANGELIST}", timeout=60)
        latencies.append(time.perf_counter() - began)
        if response.status_code != 200 or "/login/" in response.url:
            failures += 1
    return latencies, failures, in_flight


def admin_while_refunds_wait(
    base: str,
    key: str,
    charges: list[str],
    session,
    cpu: CpuShare,
    *,
    gets: int,
    in_flight: int,
    settle: float,
) -> dict:
    """The refunds changelist, idle and then while `in_flight` refund posts on slow
    charges are kept waiting on the provider (started over most of `settle` seconds, so
    all of them are in flight when the GETs begin)."""
    changelist_gets(session, base, 10)  # warm this path in both processes
    idle, idle_failures, _ = changelist_gets(session, base, gets)
    with RefundLoad(base, key, charges, in_flight, stagger=settle * 0.8) as load:
        time.sleep(settle)
        cpu.start()
        started = time.perf_counter()
        loaded, loaded_failures, seen = changelist_gets(session, base, gets, load)
        window, used = time.perf_counter() - started, cpu.stop()
    result = {
        "gets": gets,
        "in_flight": in_flight,
        "idle_p50_ms": percentile_ms(idle, 0.50),
        "idle_p99_ms": percentile_ms(idle, 0.99),
        "loaded_p50_ms": percentile_ms(loaded, 0.50),
        "loaded_p99_ms": percentile_ms(loaded, 0.99),
        "get_failures": idle_failures + loaded_failures,
        "window_s": window,
        "refunds_in_flight_min": min(seen) if seen else 0,
        "refunds_in_flight_mean": sum(seen) / len(seen) if seen else 0,
        "posts": outcomes(load.calls),
        "posts_p50_ms": percentile_ms([c.seconds for c in load.calls], 0.50),
        "cpu_cores_with_refunds_waiting": used,
    }
    result["p99_ratio"] = (
        result["loaded_p99_ms"] / result["idle_p99_ms"] if result["idle_p99_ms"] else 0.0
    )
    return result


# --- the admin's refund form, as a support agent uses it ---------------------------------


def support_agent(url: str) -> tuple[str, str, str]:
    """A support agent made as staff are (`create_support_agent`): name, password and the
    second factor's secret (base32), which the bench's authenticator reads codes from."""
    username = f"bench-agent-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "manage.py", "create_support_agent", username],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        capture_output=True,
        text=True,
    )
    password = re.search(rf"Support agent: {username} / (\S+)", done.stdout).group(1)
    secret = re.search(r"secret:\s+([A-Z2-7 ]+?)\s+\(TOTP", done.stdout).group(1)
    return username, password, secret.replace(" ", "")


def _page_field(page: requests.Response, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page.text)
    if found is None:
        raise RuntimeError(f"no {name} on {page.url} ({page.status_code})")
    return found.group(1)


def refund_form_round_trips(
    base: str, agent: tuple[str, str, str], charges: list[str], count: int
) -> dict:
    """`count` refunds through the charge's refund form, one after another, by an agent
    signed in with password and code as a person is: each the form's GET, then its POST
    and the charge page it redirects to (what the person waits for after clicking)."""
    import base64

    from django_otp.oath import totp  # the authenticator app's arithmetic, no Django needed

    username, password, secret = agent
    session = admin_session(base, username, password)
    form_url = f"{base}/admin/ledger_app/charge/{charges[0]}/refund/"
    asked = session.get(form_url, timeout=30)
    code = f"{totp(base64.b32decode(secret)):06d}"
    verified = session.post(
        asked.url,
        data={"code": code, "csrfmiddlewaretoken": _page_field(asked, "csrfmiddlewaretoken")},
        headers={"Referer": asked.url},
        timeout=30,
    )
    if 'id="refund-form"' not in verified.text:
        raise RuntimeError(f"the code page did not lead to the refund form: {verified.url}")
    gets, submits, failures = [], [], 0
    for charge in random.sample(charges, count):
        url = f"{base}/admin/ledger_app/charge/{charge}/refund/"
        began = time.perf_counter()
        form = session.get(url, timeout=30)
        gets.append(time.perf_counter() - began)
        began = time.perf_counter()
        answer = session.post(
            url,
            data={
                "amount": "0.02",  # not the API load's 0.01: that would be a repeat
                "reason": "requested_by_customer",
                "note": "",
                "idempotency_key": _page_field(form, "idempotency_key"),
                "charge_state": _page_field(form, "charge_state"),
                "csrfmiddlewaretoken": _page_field(form, "csrfmiddlewaretoken"),
                "_refund": "Refund",
            },
            headers={"Referer": url},
            timeout=30,
        )
        submits.append(time.perf_counter() - began)
        if answer.status_code != 200 or "of $0.02: " not in answer.text:
            failures += 1
    return {
        "count": count,
        "form_p50_ms": percentile_ms(gets, 0.50),
        "form_p99_ms": percentile_ms(gets, 0.99),
        "submit_p50_ms": percentile_ms(submits, 0.50),
        "submit_p99_ms": percentile_ms(submits, 0.99),
        "failures": failures,
    }
