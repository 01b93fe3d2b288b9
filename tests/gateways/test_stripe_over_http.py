"""The Stripe adapter (gateways/stripe.py) against a real server over real HTTP: a second
back office, with its own PostgreSQL database and its own gunicorn on its own port,
stands in for Stripe. The ledger under test points `LEDGER_GATEWAY=stripe` at it
(`STRIPE_API_BASE`), so every refund goes out through the official `stripe` package
and comes back in Stripe's wire format, as the provider back office speaks it.

The provider is served as deployed (DEBUG off, gunicorn's gthread workers, inline
dispatch to its own simulated provider). What is checked:

- a refund end to end: the provider holds one refund of it, under the ledger's
  provider key, and the ledger records the provider's refund id;
- replays: the same provider key sent again is answered with the same refund;
- errors: the provider's refusal is a decline (the ledger's hold is released), a key
  reused with other parameters and a wrong API key leave the outcome unknown;
- lookups: by the ledger refund id in the provider's metadata, None when never sent;
- the provider SIGKILLed mid-request, before it commits and after it commits but before
  it answers: the refund is unknown, the reconciler asks the restarted provider, and then
  there is one provider refund per ledger refund and verify_ledger agrees on both sides.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import stripe
from django.db import connection, transaction
from django.test import override_settings

from ledger_app.charges.services import record_charge
from ledger_app.mirror.events_in import apply_object
from ledger_app.models import Charge, Refund
from ledger_app.provider.dispatch import reconcile_refunds
from ledger_app.provider.dispatch.send import send_refund
from ledger_app.provider.gateways import get_gateway
from ledger_app.provider.gateways.base import GatewayUnavailable, OutcomeUnknown
from ledger_app.provider.gateways.stripe import StripeGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.invariants import assert_ledger_invariants
from tests.processes import GunicornServer, manage_alone, run_command

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "provider-instance-secret-key-not-for-production"


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


@pytest.fixture
def provider(tmp_path):
    instance = ProviderBackOffice(tmp_path)
    try:
        instance.start()
        yield instance
    finally:
        instance.close()


def pointed_at(provider: ProviderBackOffice, api_key: str | None = None):
    """The ledger's settings with the Stripe adapter aimed at the provider instance."""
    return override_settings(
        LEDGER_GATEWAY="stripe",
        STRIPE_API_KEY=api_key or provider.api_key,
        STRIPE_API_BASE=provider.running.url,
        REFUND_DISPATCH="worker",  # reserve only: each test sends when it chooses
        GATEWAY_TIMEOUT_SECONDS=10.0,
    )


def charge_on_both(provider: ProviderBackOffice, amount: int, *, ledger_amount: int | None = None):
    """A charge the provider made (through its API, with the stripe package) and the
    ledger's record of it, under the provider's id."""
    made = provider.client().v1.charges.create(
        params={"amount": amount, "currency": "usd", "source": "tok_visa"}
    )
    assert made.status == "succeeded"
    return record_charge(amount=ledger_amount or amount, currency="usd", charge_id=made.id)


def provider_refunds(provider: ProviderBackOffice, charge_id: str) -> list:
    listed = provider.client().v1.refunds.list(params={"charge": charge_id, "limit": 100})
    return list(listed.auto_paging_iter())


def reserve(charge, amount: int, key: str) -> Refund:
    return create_refund(
        RefundRequest(charge_id=charge.id, amount=amount, idempotency_key=key)
    ).item


def send_again(gateway, refund: Refund, amount: int):
    """The refund's provider call made again by hand, under its own provider key."""
    return gateway.refund(
        provider_key=refund.provider_idempotency_key,
        charge_reference=refund.charge_id,
        amount=amount,
        currency="usd",
        metadata={"ledger_refund_id": refund.id, "ledger_charge_id": refund.charge_id},
        timeout=10.0,
    )


def send_in_thread(refund_id: str) -> tuple[threading.Thread, dict]:
    """send_refund on a thread of its own (its own connection), as a worker sends."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["refund"] = send_refund(refund_id).item
        except BaseException as exc:  # reported by the test, not lost in the thread
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def assert_one_provider_refund_per_ledger_refund(provider, charges) -> None:
    """Each ledger refund that moved money is one provider refund (by the ledger id in its
    metadata and the ledger's key), of the same amount; the provider holds no other."""
    for charge in charges:
        charge.refresh_from_db()
        found = provider_refunds(provider, charge.id)
        per_ledger_id = Counter(refund.metadata["ledger_refund_id"] for refund in found)
        assert all(n == 1 for n in per_ledger_id.values()), per_ledger_id
        moved = {r.id: r.amount for r in charge.refunds.filter(status="succeeded")}
        held = {r.metadata["ledger_refund_id"]: r.amount for r in found if r.status == "succeeded"}
        assert held == moved, (held, moved)
        assert sum(moved.values()) == charge.amount_refunded
    assert_ledger_invariants()
    verified = run_command("verify_ledger")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    provider.verify_ledger()


def test_refunds_end_to_end_with_replays_errors_and_lookups(provider):
    with pointed_at(provider):
        gateway = get_gateway()
        charge = charge_on_both(provider, 5_000)

        # a refund, end to end
        refund = reserve(charge, 1_200, "order-1-refund")
        sent = send_refund(refund.id).item
        assert sent.status == "succeeded"
        [at_provider] = provider_refunds(provider, charge.id)
        assert sent.provider_refund_id == at_provider.id
        assert (at_provider.amount, at_provider.status) == (1_200, "succeeded")
        assert at_provider.metadata["ledger_refund_id"] == refund.id

        # a replay of the same provider key: the same refund, nothing new at the provider
        again = send_again(gateway, refund, 1_200)
        assert (again.verdict, again.provider_id) == ("succeeded", at_provider.id)
        assert len(provider_refunds(provider, charge.id)) == 1

        # the same key with other parameters: the first may have applied, so unknown
        with pytest.raises(OutcomeUnknown):
            send_again(gateway, refund, 999)

        # lookups: found by the ledger id; None for one never sent
        found = gateway.lookup_refund(
            provider_key=refund.provider_idempotency_key,
            charge_reference=charge.id,
            ledger_refund_id=refund.id,
        )
        assert found is not None
        assert (found.verdict, found.provider_id) == ("succeeded", at_provider.id)
        never = gateway.lookup_refund(
            provider_key="refund:never-sent", charge_reference=charge.id, ledger_refund_id="re_x"
        )
        assert never is None

    # the provider's own refusal is a decline: the ledger holds more of this charge than the
    # provider does (3,000 of a 1,000 charge), so the provider says no and the hold is released
    with pointed_at(provider):
        short = charge_on_both(provider, 1_000, ledger_amount=5_000)
        refused = reserve(short, 3_000, "order-2-refund")
        failed = send_refund(refused.id).item
        assert failed.status == "failed"
        assert "amount_too_large" in failed.status_detail
        short.refresh_from_db()
        assert short.amount_refunded == 0
        assert provider_refunds(provider, short.id) == []

    # a wrong API key: the provider answers 401, which says nothing about the refund
    with (
        pointed_at(provider, api_key="sk_wrong_key_for_this_provider"),
        pytest.raises(GatewayUnavailable),
    ):
        get_gateway().lookup_refund(
            provider_key="refund:x", charge_reference=charge.id, ledger_refund_id="re_x"
        )

    with pointed_at(provider):
        assert_one_provider_refund_per_ledger_refund(provider, [charge, short])


@pytest.mark.parametrize(
    ("point", "provider_applied"),
    [
        ("refund.reserve_locked", False),  # its refund written, not committed
        ("refund.settled", True),  # its refund committed and succeeded, not yet answered
    ],
)
def test_provider_sigkilled_mid_request_then_reconciled(provider, point, provider_applied):
    with pointed_at(provider):
        charge = charge_on_both(provider, 4_000)
        first = reserve(charge, 1_500, "before-the-crash")
        assert send_refund(first.id).item.status == "succeeded"
    provider.server.stop()

    provider.start(LEDGER_FAULT_HANG_AT=point)
    with pointed_at(provider):
        doomed = reserve(charge, 2_000, "during-the-crash")
        thread, outcome = send_in_thread(doomed.id)
        provider.wait_for(f"fault point reached: {point}")
        provider.server.kill()
        thread.join(30)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome
        # the connection dropped mid-request: the ledger cannot know, so it does not guess
        assert outcome["refund"].status == "unknown"
        charge.refresh_from_db()
        assert charge.amount_refunded == 3_500  # still held

    provider.start()
    with pointed_at(provider):
        held_at_provider = [
            r.metadata["ledger_refund_id"] for r in provider_refunds(provider, charge.id)
        ]
        assert (doomed.id in held_at_provider) is provider_applied
        reconcile_refunds()
        doomed.refresh_from_db()
        # applied: the lookup finds it; not applied: the lookup finds nothing and the
        # same provider key is sent again, once
        assert doomed.status == "succeeded"
        assert_one_provider_refund_per_ledger_refund(provider, [charge])
        charge.refresh_from_db()
        assert charge.amount_refunded == 3_500


def test_sync_lists_the_providers_objects_page_by_page_and_they_apply(provider, monkeypatch):
    """The adapter's list call (sync_provider's) through the stripe package and its
    auto-pagination, against the provider instance: every charge and refund made there in
    the window, none outside it; applied as a sync applies them, the books hold them."""
    client = provider.client()
    made = [
        client.v1.charges.create(params={"amount": amount, "currency": "usd", "source": "tok_visa"})
        for amount in (1_000, 2_000, 3_000)
    ]
    refunded = client.v1.refunds.create(params={"charge": made[0].id, "amount": 400})
    start = datetime.fromtimestamp(min(c.created for c in made), tz=UTC)
    end = start + timedelta(hours=1)
    with pointed_at(provider):
        monkeypatch.setattr(StripeGateway, "page_size", 2)  # three charges: two pages
        gateway = get_gateway()

        charges = gateway.list_created("charge", start=start, end=end)
        refunds = gateway.list_created("refund", start=start, end=end)
        before = gateway.list_created("charge", start=start - timedelta(hours=1), end=start)

        assert sorted(c["id"] for c in charges) == sorted(c.id for c in made)
        assert [r["id"] for r in refunds] == [refunded.id] and before == []
        for obj in sorted(charges, key=lambda c: c["created"]) + refunds:
            with transaction.atomic():
                assert apply_object(obj).moved, obj["id"]
    assert Charge.objects.count() == 3
    adopted = Refund.objects.get()
    assert (adopted.provider_refund_id, adopted.amount, adopted.source) == (
        refunded.id,
        400,
        "provider",
    )
    assert Charge.objects.get(pk=made[0].id).amount_refunded == 400
    assert_ledger_invariants()
