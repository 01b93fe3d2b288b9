"""Probes for load balancers: /healthz says the process answers, /readyz that it can serve
(the database answers, every migration is applied). The outages are real: a server whose
database port has nothing listening, a fresh database file never migrated."""

from __future__ import annotations

from unittest import mock

import pytest
import requests
from axes.models import AccessAttempt
from django.db import OperationalError, connection
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client

from serving import health
from simulated_provider.models import ProviderCharge, ProviderRefund, ProviderRequest
from tests.processes import GunicornServer, free_loopback_port, run_command

pytestmark = pytest.mark.sqlite_pass


def wait_healthy(server: GunicornServer, timeout: float = 60) -> None:
    """Started is when /healthz answers; GunicornServer.wait_ready asks the API, which a
    server without its database may not answer the way it expects."""
    server.wait_answering(f"{server.url}/healthz", 200, timeout)


@pytest.fixture
def server_factory(tmp_path):
    servers = []

    def start(**env: str) -> GunicornServer:
        server = GunicornServer(tmp_path, workers=1, threads=2, env=env)
        servers.append(server)
        wait_healthy(server)
        return server

    yield start
    for server in servers:
        server.stop()


def assert_no_store(response) -> None:
    assert "no-store" in response.headers["Cache-Control"]


class TestHealth:
    def test_answers_ok_without_touching_the_database(self, client):
        # No django_db mark: pytest-django makes any query here raise.
        response = client.get("/healthz")

        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert response["Content-Type"] == "application/json"
        assert_no_store(response)

    @pytest.mark.django_db
    @pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options"])
    def test_takes_get_and_head_only(self, client, method):
        heads = [client.head("/healthz"), client.head("/readyz")]

        refused = [getattr(client, method)(path) for path in ("/healthz", "/readyz")]

        assert [h.status_code for h in heads] == [200, 200]
        assert [h.content for h in heads] == [b"", b""]
        assert [r.status_code for r in refused] == [405, 405]
        assert [r["Allow"] for r in refused] == ["GET, HEAD"] * 2


@pytest.mark.django_db
class TestReadiness:
    def test_ready_when_the_database_answers_and_every_migration_is_applied(self, client):
        response = client.get("/readyz")

        assert response.status_code == 200
        assert response.json() == {
            "status": "ok",
            "checks": {"database": "ok", "migrations": "ok"},
        }
        assert_no_store(response)

    def test_not_ready_while_a_known_migration_is_not_recorded(self, client):
        MigrationRecorder(connection).record_unapplied("ledger_app", "0001_initial")

        response = client.get("/readyz")

        assert response.status_code == 503
        assert response.json() == {
            "status": "unavailable",
            "checks": {"database": "ok", "migrations": "1 not applied"},
        }
        assert_no_store(response)

    @pytest.mark.postgres
    def test_behind_a_pooler_not_ready_unless_the_server_sets_the_lock_timeout(
        self, client, settings
    ):
        """Behind a transaction pooler lock_timeout is the server's: one that is not
        DATABASE_LOCK_TIMEOUT_MS stops the process being ready. (The test's session sets
        5000 ms at connect, standing in for the server's setting.)"""
        settings.DATABASE_TRANSACTION_POOLER = True
        settings.DATABASE_LOCK_TIMEOUT_MS = 5000
        assert client.get("/readyz").status_code == 200

        settings.DATABASE_LOCK_TIMEOUT_MS = 7000
        response = client.get("/readyz")

        assert response.status_code == 503
        assert response.json()["checks"]["database"] == (
            "lock_timeout is 5000ms on the server, not DATABASE_LOCK_TIMEOUT_MS (7000ms)"
        )

    def test_reads_the_migration_files_once_per_process_not_per_probe(self, client):
        health._known_migrations.cache_clear()
        with mock.patch.object(health, "MigrationLoader", wraps=health.MigrationLoader) as loader:
            answers = [client.get("/readyz").status_code for _ in range(3)]

        assert answers == [200, 200, 200]
        assert loader.call_count == 1

    def test_a_failing_database_query_is_503_logged_once_and_health_stays_200(self, client, caplog):
        health._readiness_log = health.ReadinessLog()
        broken = mock.patch.object(health, "connection", wraps=connection)
        with broken as wrapped:
            wrapped.cursor.side_effect = OperationalError("server closed the connection")
            answers = [client.get("/readyz") for _ in range(3)]
            alive = client.get("/healthz")

        assert [a.status_code for a in answers] == [503, 503, 503]
        assert answers[0].json()["checks"] == {
            "database": "unavailable",
            "migrations": "not checked",
        }
        assert b"server closed" not in answers[0].content  # the reason stays in the log
        assert alive.status_code == 200
        said = [r.getMessage() for r in caplog.records if r.name.startswith("serving.")]
        assert said == ["not ready: database unavailable"]
        assert not [r for r in caplog.records if r.name == "django.request"]

    def test_no_sign_in_api_key_or_lockout_stands_in_the_way(self, client, settings):
        settings.AXES_FAILURE_LIMIT = 1
        wrong = {"username": "nobody", "password": "wrong-password-1"}
        client.post("/admin/login/", wrong)
        locked = client.post("/admin/login/", wrong)
        assert locked.status_code == 429 and AccessAttempt.objects.exists()  # locked out
        stranger = Client(HTTP_AUTHORIZATION="Bearer sk_" + "x" * 40)

        answers = [stranger.get("/healthz"), stranger.get("/readyz"), client.get("/readyz")]

        assert [a.status_code for a in answers] == [200, 200, 200]

    def test_probes_over_plain_http_are_not_sent_to_https(self, settings):
        """Behind a TLS proxy with the SSL redirect on, a load balancer or scraper that asks
        a process directly over HTTP gets its answer, not a 301 it would read as down."""
        settings.SECURE_SSL_REDIRECT = True
        plain = Client()  # made after the change: its middleware reads the new setting

        answers = {path: plain.get(path).status_code for path in ("/healthz", "/readyz")}

        assert answers == {"/healthz": 200, "/readyz": 200}
        assert plain.get("/metrics").status_code == 200
        assert plain.get("/admin/").status_code == 301  # everything else still goes to HTTPS

    def test_asks_nothing_of_the_payment_provider(self, client):
        client.get("/healthz")
        client.get("/readyz")

        assert not ProviderRequest.objects.exists()
        assert not ProviderRefund.objects.exists() and not ProviderCharge.objects.exists()


class TestProbesOfARealServer:
    def test_without_its_database_the_server_is_alive_and_not_ready(self, server_factory):
        nowhere = f"postgres://root@127.0.0.1:{free_loopback_port()}/nothing"
        server = server_factory(DATABASE_URL=nowhere)

        ready = [requests.get(f"{server.url}/readyz", timeout=10) for _ in range(3)]
        alive = requests.get(f"{server.url}/healthz", timeout=10)

        assert [r.status_code for r in ready] == [503, 503, 503]
        assert ready[0].json() == {
            "status": "unavailable",
            "checks": {"database": "unavailable", "migrations": "not checked"},
        }
        assert "no-store" in ready[0].headers["Cache-Control"]
        assert alive.status_code == 200 and alive.json() == {"status": "ok"}
        log = server.log()
        assert log.count("not ready: database unavailable") == 1, log
        assert "Traceback" not in log

    def test_on_a_database_never_migrated_it_is_not_ready_until_migrate_runs(
        self, server_factory, tmp_path
    ):
        fresh = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        server = server_factory(DATABASE_URL=fresh)

        before = requests.get(f"{server.url}/readyz", timeout=10)
        migrated = run_command("migrate", "--noinput", DATABASE_URL=fresh, timeout=300)
        after = requests.get(f"{server.url}/readyz", timeout=10)

        assert before.status_code == 503
        checks = before.json()["checks"]
        assert checks["database"] == "ok"
        assert checks["migrations"].endswith(" not applied")
        assert int(checks["migrations"].split()[0]) > 10  # all of them: none was recorded
        assert migrated.returncode == 0, migrated.stderr
        assert after.status_code == 200, after.text
        assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert "Traceback" not in server.log()

    @pytest.mark.django_db(transaction=True)
    def test_a_migrated_server_is_ready_and_asks_nothing_of_the_provider(self, server_factory):
        server = server_factory()

        answers = [
            requests.get(f"{server.url}/healthz", timeout=10),
            requests.get(f"{server.url}/readyz", timeout=10),
            requests.head(f"{server.url}/readyz", timeout=10),
        ]

        assert [a.status_code for a in answers] == [200, 200, 200]
        assert answers[1].json()["checks"] == {"database": "ok", "migrations": "ok"}
        assert not ProviderRequest.objects.exists()
        assert not ProviderRefund.objects.exists() and not ProviderCharge.objects.exists()
