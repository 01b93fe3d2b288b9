"""A second back office that stands in for Stripe in tests/gateways/test_stripe_over_http.py:
its own PostgreSQL database (beside the test database), its own API key for the ledger
under test, served by gunicorn on its own port, with its own simulated provider behind it."""

from __future__ import annotations

import re
import time
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
import stripe
from django.db import connection

from tests.processes import GunicornServer, manage_alone

SECRET_KEY = "provider-instance-secret-key-not-for-production"
# The fields of a balance transaction the books keep as the provider listed it.
MIRRORED = (
    *("id", "type", "reporting_category", "source", "amount", "fee", "net", "currency"),
    *("description", "status", "created", "available_on", "payout"),
)


class ProviderBackOffice:
    """A second back office on a database of its own, served by gunicorn: the provider."""

    def __init__(self, tmp_path: Path) -> None:
        db = connection.settings_dict
        self.tmp_path = tmp_path
        self.name = f"{db['NAME']}_provider"
        self.admin_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/postgres"
        self.url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{self.name}"
        self._run_sql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self._run_sql(f'CREATE DATABASE "{self.name}"')
        self._manage("migrate", "--no-input")
        made = self._manage("create_api_key", "ledger-under-test")
        key = re.search(r"\bsk_\w+", made.stdout)
        assert key, made.stdout
        self.api_key = key[0]
        self.server: GunicornServer | None = None
        self.starts = 0

    def _run_sql(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(sql)

    def _env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": self.url,
            "DJANGO_SECRET_KEY": SECRET_KEY,
            "DJANGO_DOTENV": "false",
            "LEDGER_GATEWAY": "simulated",
        }

    def _manage(self, *args: str):
        done = manage_alone(*args, env=self._env())
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def start(self, **env: str) -> str:
        """Serve it (again: same database, new port); its API base URL."""
        self.starts += 1
        logs = self.tmp_path / f"provider-{self.starts}"
        logs.mkdir()
        self.server = GunicornServer(
            logs, workers=1, threads=4, own_group=True, env=env, DATABASE_URL=self.url
        )
        self.server.wait_ready()
        return self.server.url

    @property
    def running(self) -> GunicornServer:
        assert self.server is not None, "start() it first"
        return self.server

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.running.log():
            assert time.monotonic() < deadline, f"never reached {text!r}:\n{self.running.log()}"
            time.sleep(0.05)

    def client(self) -> stripe.StripeClient:
        return stripe.StripeClient(
            self.api_key, base_addresses={"api": self.running.url}, max_network_retries=0
        )

    def verify_ledger(self):
        return self._manage("verify_ledger")

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self._run_sql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def sync(self, since: date) -> str:
        """Its own sync_provider from `since`: its simulated provider pays out what is due,
        and its books mirror that provider's balance transactions and payouts. What it said."""
        return self._manage("sync_provider", "--since", since.isoformat()).stdout

    def balance_transactions(self) -> list[tuple[Any, ...]]:
        """Its books' balance transactions, by id: the fields MIRRORED names."""
        with psycopg.connect(self.url) as db:
            return db.execute(
                "SELECT id, type, reporting_category, source, amount, fee, net, currency, "
                "description, status, created, available_on, payout "
                "FROM ledger_app_balancetransaction ORDER BY id"
            ).fetchall()
