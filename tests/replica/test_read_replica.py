"""The read replica, against a real one: a PostgreSQL primary and a streaming hot standby
made for this module (initdb, pg_basebackup), and the app in its own process with
DATABASE_URL on the primary and DATABASE_REPLICA_URL on the standby (driver.py).

Pausing the standby's replay makes it visibly behind: what the lists show then came from
it, and anything that must see the primary (money checks, idempotent replays, API keys,
admin actions, the attention queue) is shown to.
"""

from __future__ import annotations

import glob
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from django.db import connection

from tests.processes import ROOT

pytestmark = pytest.mark.postgres

HERE = Path(__file__).resolve().parent
TIMEOUT = 30  # seconds any one step may take before the test gives up


def pg_bin() -> Path:
    """Debian's PostgreSQL binaries (the newest installed), else those on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        pytest.fail("initdb not found: install PostgreSQL's server binaries (postgresql-15)")
    return Path(initdb).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    """A primary and its streaming replica, each in a directory of `base`."""

    base: Path
    bin: Path
    primary_port: int
    replica_port: int
    as_postgres: list[str]

    def pg(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        """Run a PostgreSQL binary as the OS user that owns the data directories."""
        result = subprocess.run(
            [*self.as_postgres, str(self.bin / tool), *args],
            cwd=self.base,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{tool} {args}: {result.stdout}{result.stderr}"
        return result

    def url(self, port: int, db: str = "ledger") -> str:
        return f"postgres://root@127.0.0.1:{port}/{db}"

    def sql(self, port: int, query: str, *params, db: str = "ledger"):
        with psycopg.connect(self.url(port, db), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchone() if cursor.description else None

    def primary(self, query: str, *params):
        return self.sql(self.primary_port, query, *params)

    def replica(self, query: str, *params):
        return self.sql(self.replica_port, query, *params)

    def caught_up(self) -> None:
        """Wait until the replica has replayed everything the primary has written."""
        target = self.primary("SELECT pg_current_wal_lsn()::text")[0]
        wait_for(
            lambda: self.replica("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", target)[0],
            "the replica to replay up to the primary",
        )

    def pause(self) -> None:
        """Replay paused with everything written so far replayed: from now on the replica
        is behind by whatever the primary writes."""
        self.caught_up()
        self.replica("SELECT pg_wal_replay_pause()")
        wait_for(
            lambda: self.replica("SELECT pg_get_wal_replay_pause_state()")[0] == "paused",
            "replay to pause",
        )

    def resume(self) -> None:
        self.replica("SELECT pg_wal_replay_resume()")
        self.caught_up()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def cluster():
    """A primary (fsync off, trust auth incl. replication) with the app's schema, and a
    streaming replica of it, both stopped at the end. None off PostgreSQL (each test then
    skips, or fails under CI=true, by the `postgres` marker)."""
    if connection.vendor != "postgresql":
        yield None
        return
    root = os.geteuid() == 0  # initdb refuses root: run the server as `postgres`
    # A private directory (mkdtemp) where `postgres` can reach it, whatever TMPDIR says.
    parent = "/tmp" if root else None  # noqa: S108
    base = Path(tempfile.mkdtemp(prefix="ledger-replica-", dir=parent))
    if root:
        shutil.chown(base, "postgres", "postgres")
    cluster = Cluster(
        base=base,
        bin=pg_bin(),
        primary_port=free_port(),
        replica_port=free_port(),
        as_postgres=["runuser", "-u", "postgres", "--"] if root else [],
    )
    started: list[str] = []
    try:
        cluster.pg(
            "initdb", "-D", "primary", "-U", "root", "-A", "trust",
            "-N", "--no-locale", "-E", "UTF8",
        )  # fmt: skip
        with open(base / "primary" / "postgresql.conf", "a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{base}'\n"
                "fsync = off\nfull_page_writes = off\n"
                "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
                "shared_buffers = 16MB\n"
            )
        server = ["-w", "-t", str(TIMEOUT), "start"]
        cluster.pg(
            "pg_ctl", "-D", "primary", "-l", "primary.log",
            "-o", f"-p {cluster.primary_port}", *server,
        )  # fmt: skip
        started.append("primary")
        cluster.sql(cluster.primary_port, "CREATE DATABASE ledger", db="postgres")
        # The schema is made while the replica is being copied: it streams in as it goes.
        migrate = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=app_env(cluster, replica=False),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            cluster.pg(
                "pg_basebackup", "-h", "127.0.0.1", "-p", str(cluster.primary_port),
                "-U", "root", "-D", "replica", "-R", "-X", "stream", "-c", "fast",
            )  # fmt: skip
            cluster.pg(
                "pg_ctl", "-D", "replica", "-l", "replica.log",
                "-o", f"-p {cluster.replica_port}", *server,
            )  # fmt: skip
            started.append("replica")
            migrated = migrate.communicate(timeout=120)[0]
        finally:
            if migrate.poll() is None:
                migrate.kill()
                migrate.wait()
        assert migrate.returncode == 0, migrated
        assert cluster.replica("SELECT pg_is_in_recovery()")[0]
        cluster.caught_up()
        yield cluster
    finally:
        for name in reversed(started):
            subprocess.run(
                [*cluster.as_postgres, str(cluster.bin / "pg_ctl"), "-D", name]
                + ["-m", "immediate", "stop"],
                cwd=base,
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)


def app_env(cluster: Cluster, *, replica: bool = True) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LEDGER_FAULT", "DATABASE_", "DJANGO_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="backoffice.settings",
        DJANGO_SECRET_KEY="replica-test-" + uuid.uuid4().hex,
        DJANGO_ALLOWED_HOSTS="testserver",
        DATABASE_URL=cluster.url(cluster.primary_port),
        LEDGER_GATEWAY="simulated",
        SIMULATED_GATEWAY_LATENCY_MS="0",
        REFUND_DISPATCH="inline",
        API_RATE_LIMIT="10000/second",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    if replica:
        env["DATABASE_REPLICA_URL"] = cluster.url(cluster.replica_port)
    return env


class App:
    """The app in its own process (driver.py): one request at a time."""

    def __init__(self, cluster: Cluster):
        self.log = cluster.base / "app.log"
        self.log_file = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "driver.py")],
            cwd=ROOT,
            env=app_env(cluster),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            text=True,
            bufsize=1,
        )

    def pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None  # both PIPE
        return stdin, stdout

    def send(self, command: dict) -> dict:
        stdin, stdout = self.pipes()
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        # One answer line per command, so nothing is left buffered between them.
        ready = select.select([stdout], [], [], TIMEOUT)[0]
        assert ready, f"no answer in {TIMEOUT}s to {command}:\n{self.log.read_text()[-3000:]}"
        line = stdout.readline()
        assert line, f"the app process ended:\n{self.log.read_text()[-3000:]}"
        return json.loads(line)

    def request(self, method: str, path: str, **kwargs) -> dict:
        answer = self.send({"method": method, "path": path, **kwargs})
        assert answer["status"] < 500, f"{method} {path}: {answer}\n{self.log.read_text()[-3000:]}"
        return answer

    def get(self, path: str, **kwargs) -> dict:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> dict:
        return self.request("POST", path, **kwargs)

    def ok(self, method: str, path: str, **kwargs) -> Any:  # the JSON body, or the text
        answer = self.request(method, path, **kwargs)
        assert answer["status"] == 200, f"{method} {path}: {answer}"
        return answer.get("json", answer.get("text"))

    def charge(self, amount: int, **metadata: str) -> dict:
        return self.ok(
            "POST",
            "/v1/charges",
            json={"amount": amount, "currency": "usd", "metadata": metadata},
        )

    def refund(self, charge_id: str, amount: int | None = None, key: str | None = None):
        body = {"charge": charge_id} | ({"amount": amount} if amount is not None else {})
        headers = {"Idempotency-Key": key} if key else {}
        return self.post("/v1/refunds", json=body, headers=headers)

    def ids(self, path: str) -> set[str]:
        return {item["id"] for item in self.ok("GET", path)["data"]}

    def close(self) -> None:
        stdin, stdout = self.pipes()
        stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        stdout.close()
        self.log_file.close()


@pytest.fixture(scope="module")
def app(cluster):
    if cluster is None:
        yield None
        return
    app = App(cluster)
    yield app
    app.close()


@pytest.fixture
def paused(cluster):
    """The replica's replay paused for the test body, resumed (and caught up) after."""
    cluster.pause()
    yield
    cluster.resume()


def admin_list(app: App, model: str) -> str:
    return app.ok("GET", f"/admin/ledger_app/{model}/", **{"as": "admin"})


def test_lists_read_the_replica_and_show_new_rows_once_it_replays(cluster, app):
    charge = app.charge(10_000)
    cluster.pause()
    try:
        new_charge = app.charge(2_000)
        refund = app.refund(charge["id"], 1_500)["json"]
        assert refund["status"] == "succeeded"

        # The replica has not replayed them: every list reads it.
        assert new_charge["id"] not in app.ids("/v1/charges?limit=100")
        assert refund["id"] not in app.ids("/v1/refunds?limit=100")
        assert refund["id"] not in app.ids(f"/v1/charges/{charge['id']}/refunds")
        events = app.ok("GET", "/v1/events?limit=100")["data"]
        assert refund["id"] not in {e["data"]["object"]["id"] for e in events}
        expanded = app.ok("GET", "/v1/charges?limit=100&expand[]=data.refunds")["data"]
        listed = next(c for c in expanded if c["id"] == charge["id"])
        assert listed["amount_refunded"] == 0  # the charge as the replica has it
        assert listed["refunds"]["data"] == []  # and its refunds from there too
        assert refund["id"] not in admin_list(app, "refund")
        assert new_charge["id"] not in admin_list(app, "charge")
        assert charge["id"] in admin_list(app, "charge")

        # An object asked for by id is found on the primary when the replica lacks it.
        assert app.ok("GET", f"/v1/refunds/{refund['id']}")["amount"] == 1_500
        assert app.ok("GET", f"/v1/charges/{new_charge['id']}")["amount"] == 2_000
        # One it has comes from it, a moment behind.
        assert app.ok("GET", f"/v1/charges/{charge['id']}")["amount_refunded"] == 0
    finally:
        cluster.resume()

    assert new_charge["id"] in app.ids("/v1/charges?limit=100")
    assert refund["id"] in app.ids("/v1/refunds?limit=100")
    assert app.ids(f"/v1/charges/{charge['id']}/refunds") == {refund["id"]}
    events = app.ok("GET", "/v1/events?limit=100")["data"]
    assert refund["id"] in {e["data"]["object"]["id"] for e in events}
    assert app.ok("GET", f"/v1/charges/{charge['id']}")["amount_refunded"] == 1_500
    assert refund["id"] in admin_list(app, "refund")
    assert new_charge["id"] in admin_list(app, "charge")


def test_money_checks_replays_and_api_keys_read_the_primary(cluster, app):
    charge = app.charge(5_000)
    cluster.pause()
    try:
        whole = app.refund(charge["id"], key="whole")
        assert whole["status"] == 200 and whole["json"]["amount"] == 5_000

        # The replica still shows the whole charge refundable...
        seen = app.ok("GET", f"/v1/charges/{charge['id']}")
        assert seen["amount_refunded"] == 0 and not seen["refunded"]
        # ...but a refund is checked against the primary, where nothing is left.
        refused = app.refund(charge["id"], 1)
        assert refused["status"] == 400
        assert refused["json"]["error"]["code"] == "charge_already_refunded"

        # Retrieve after create finds it (on the primary); the list shows it once replayed.
        assert app.ok("GET", f"/v1/refunds/{whole['json']['id']}")["status"] == "succeeded"
        assert whole["json"]["id"] not in app.ids("/v1/refunds?limit=100")
        # A cursor only the primary has yet pages there, rather than a 404.
        after = app.get(f"/v1/refunds?starting_after={whole['json']['id']}")
        assert after["status"] == 200, after

        # A key used while the replica is behind replays: keys are read on the primary.
        replayed = app.refund(charge["id"], key="whole")
        assert replayed["status"] == 200
        assert replayed["headers"].get("Idempotent-Replayed") == "true"
        assert replayed["json"]["id"] == whole["json"]["id"]
        key_rows = "SELECT count(*) FROM ledger_app_idempotencyrecord WHERE key = %s"
        assert cluster.replica(key_rows, "whole")[0] == 0
        assert cluster.primary(key_rows, "whole")[0] == 1

        # API keys are checked on the primary: one made now works at once, and once
        # revoked it is refused at once.
        made = app.send({"op": "api_key"})
        assert app.get("/v1/refunds", key=made["key"])["status"] == 200
        app.send({"op": "revoke", "prefix": made["prefix"]})
        assert app.get("/v1/refunds", key=made["key"])["status"] == 401
    finally:
        cluster.resume()
    assert whole["json"]["id"] in app.ids("/v1/refunds?limit=100")


def test_admin_actions_and_the_attention_queue_read_the_primary(cluster, app, paused):
    charge = app.charge(4_000)
    declining = app.charge(1_000, simulate_refund="decline")
    declined = app.refund(declining["id"])["json"]
    assert declined["status"] == "failed"

    # The list, only looked at, is the replica's.
    assert charge["id"] not in admin_list(app, "charge")
    assert declined["id"] not in admin_list(app, "refund")
    # The attention queue is worked through, so it is the primary's.
    assert declined["id"] in admin_list(app, "refundattention")

    # An action is a POST to the list: what it acts on is read on the primary.
    page = app.ok(
        "POST",
        "/admin/ledger_app/charge/",
        **{"as": "admin"},
        form={"action": "refund_in_full", "index": "0", "_selected_action": [charge["id"]]},
    )
    assert "Refund charges in full" in page
    assert charge["id"] in page
    assert "$40.00" in page


def test_a_replica_that_is_down_is_read_around(cluster, app):
    cluster.caught_up()
    charge = app.charge(6_000)
    assert charge["id"] in app.ids("/v1/charges?limit=100")  # through the replica
    cluster.pg("pg_ctl", "-D", "replica", "-m", "immediate", "stop")

    refund = app.refund(charge["id"], 600)["json"]
    listed = app.get("/v1/refunds?limit=100")
    assert listed["status"] == 200
    assert refund["id"] in {r["id"] for r in listed["json"]["data"]}  # from the primary
    assert any("read replica failed" in w for w in listed["warnings"]), listed["warnings"]

    # Once failed, the replica rests: the next reads go to the primary without trying it.
    for path in ("/v1/charges", "/v1/events", f"/v1/charges/{charge['id']}/refunds"):
        answer = app.get(path)
        assert answer["status"] == 200 and answer["warnings"] == [], answer
    assert app.ok("GET", f"/v1/refunds/{refund['id']}")["amount"] == 600
    assert refund["id"] in admin_list(app, "refund")
    assert charge["id"] in admin_list(app, "charge")
