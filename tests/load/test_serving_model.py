"""A slow provider never freezes the back office: the serving model `make run` uses.

gunicorn with gunicorn.conf.py (gthread) and the inline wait budget, a provider that takes
SLOW_MS per refund, and more refunds in flight than the server has processes. While every
one of them still waits on the provider, admin pages and API reads must answer, and the
refunds must have been answered `pending`. Proved by order of events, not by timing: the
provider writes its record only after its delay, so "no provider refund exists yet" when a
page answers means that page did not wait for the provider. In the old model (two sync
workers, the send inside the request) every page waited behind the refunds. The
process has fewer pooled database connections than refunds in flight, so this also
proves that a thread waiting on the provider gives its connection back.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Refund
from simulated_provider.models import ProviderRefund
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import GunicornServer

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SLOW_MS = 6_000
IN_FLIGHT = 8  # refunds waiting on the provider at once, in one web process
POOL = 4  # database connections that process has: fewer than its refunds in flight


@pytest.fixture
def server(transactional_db, tmp_path):
    srv = GunicornServer(
        tmp_path,
        workers=1,
        threads=12,
        REFUND_DISPATCH="inline",
        REFUND_INLINE_WAIT_SECONDS="0.3",
        REFUND_SEND_THREADS="8",
        SIMULATED_GATEWAY_LATENCY_MS=str(SLOW_MS),
        # Django's psycopg pool, with a short wait for a connection: the sends only get
        # through if a thread that waits on the provider holds no connection meanwhile.
        DATABASE_POOL_MAX_SIZE=str(POOL),
        DATABASE_POOL_TIMEOUT_SECONDS="3",
        LOG_LEVEL="WARNING",
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_pages_answer_while_refunds_wait_on_a_slow_provider(server):
    _, key = create_api_key(name="serving-test")
    charges = [
        ChargeFactory(amount=1_000, metadata={"simulate_refund": "slow"}) for _ in range(IN_FLIGHT)
    ]
    answers: list[requests.Response] = []

    def refund(charge_id: str) -> None:
        answers.append(
            requests.post(
                f"{server.url}/v1/refunds",
                data={"charge": charge_id, "amount": "400"},
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"s-{charge_id}"},
                timeout=30,
            )
        )

    clients = [threading.Thread(target=refund, args=(c.id,)) for c in charges]
    for client in clients:
        client.start()
    for client in clients:
        client.join(30)

    # Every refund was answered, pending, while the provider still works on all of them.
    assert [a.status_code for a in answers] == [200] * IN_FLIGHT, [a.text for a in answers]
    assert {a.json()["status"] for a in answers} == {"pending"}
    assert not ProviderRefund.objects.exists()
    assert Refund.objects.filter(dispatch_attempts=1, leased_until__isnull=False).count() == (
        IN_FLIGHT
    )

    # Pages answer now, not after the provider: an API read, an admin page.
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {key}"
    listed = session.get(f"{server.url}/v1/refunds", params={"limit": 100}, timeout=30)
    login = requests.get(f"{server.url}/admin/login/", timeout=30)
    assert listed.status_code == 200 and login.status_code == 200
    assert {r["status"] for r in listed.json()["data"]} == {"pending"}
    assert not ProviderRefund.objects.exists(), "a page waited for the provider"

    # The send pools finish every refund: one provider refund each, the books agree.
    deadline = time.monotonic() + SLOW_MS / 1000 + 30
    while (
        Refund.objects.exclude(status=Refund.Status.SUCCEEDED).exists()
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert set(Refund.objects.values_list("status", flat=True)) == {Refund.Status.SUCCEEDED}
    assert ProviderRefund.objects.count() == IN_FLIGHT
    retrieved = session.get(f"{server.url}/v1/refunds/{answers[0].json()['id']}", timeout=30)
    assert retrieved.json()["status"] == "succeeded"
    assert_ledger_invariants()
    assert_provider_agrees()
