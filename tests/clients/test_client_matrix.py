"""The client matrix (issue 43): the official `stripe` packages for Python and for Node,
each in its newest release and in the newest of the major before, run one scenario
(scenario.py, scenario.js) against the app served by gunicorn in production mode: a
charge and partial refunds, their list walked page by page, a refund by PaymentIntent,
an expanded charge, a canceled refund, a mismatched retry, a declined card and a webhook
verified with the package's own signature check. Each client is used unchanged: an API
key and the server's address, nothing else.

The versions are the lock files' (requirements/dev.txt for the project's own Python
client, requirements/clients/stripe-python-older.txt, tests/clients/package-lock.json),
installed by `make test`; the test checks that each client is the version its lock pins
and that every answer came in the API version the package itself pins and sent (the keys
default to the oldest version, so an answer in any other was asked for). Without node or
an installed client these skip loudly, and under CI=true they fail.
"""

from __future__ import annotations

import json

import pytest

from ledger_app import api_versions
from ledger_app.access.api_keys import create_api_key
from ledger_app.events.endpoints import create_endpoint
from ledger_app.models import RefundLimit
from tests.clients.matrix import MATRIX, WEBHOOK_KEY, Client, require
from tests.invariants import assert_ledger_invariants
from tests.processes import GunicornServer, run_alone, run_command
from tests.webhooks.receiver import Receiver

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

STEPS = [
    "client",
    "charge",
    "partial_refund",
    "list_refunds",
    "refund_by_payment_intent",
    "expand",
    "cancel",
    "mismatched_retry",
    "declined",
    "balance",
]


def keys() -> dict[str, str]:
    """A read-write key, and one whose refunds over 10.00 wait for approval; both answer
    in the oldest version unless a request asks for another."""
    _, secret = create_api_key(name="client matrix", api_version=api_versions.LEGACY)
    row, limited = create_api_key(name="client matrix limited", api_version=api_versions.LEGACY)
    RefundLimit.objects.create(api_key=row, currency="usd", per_refund=1_000, per_day=5_000)
    return {"STRIPE_API_KEY": secret, "STRIPE_LIMITED_API_KEY": limited}


def scenario(
    client: Client, mode: str, env: dict[str, str], server: GunicornServer | None = None
) -> dict[str, dict]:
    """Runs the scenario; its steps by name, after checking that every one passed (what
    the client and the server said if not)."""
    ran = run_alone(client.command(mode), {**client.env(), **env})
    said = f"{client.name} {mode} exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
    if server is not None:
        said += f"\nthe server said:\n{server.log()[-4000:]}"
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    assert ran.returncode == 0 and lines and all(line["ok"] for line in lines), said
    assert lines[-1]["step"] == "done", said
    return {line["step"]: line for line in lines}


def verify_a_delivery(client: Client, got: Receiver, refund_id: str, secret: str, tmp_path):
    """deliver_webhooks sends the refund.created events; the client checks the one of
    `refund_id` with its package's own signature check."""
    delivered = run_command(
        "deliver_webhooks",
        "--once",
        WEBHOOK_ALLOW_PRIVATE_URLS="true",
        WEBHOOK_SECRET_KEYS=WEBHOOK_KEY,
    )
    assert delivered.returncode == 0, delivered.stdout + delivered.stderr
    got.wait_for(1)
    bodies = [r for r in got.received if json.loads(r.body)["data"]["object"]["id"] == refund_id]
    assert len(bodies) == 1, [json.loads(r.body)["type"] for r in got.received]
    body_file = tmp_path / "delivery.json"
    body_file.write_bytes(bodies[0].body)
    steps = scenario(
        client,
        "verify-webhook",
        {
            "WEBHOOK_BODY_FILE": str(body_file),
            "WEBHOOK_SIGNATURE": bodies[0].signature,
            "WEBHOOK_SECRET": secret,
            "WEBHOOK_REFUND": refund_id,
        },
    )
    assert steps["webhook"]["type"] == "refund.created"
    assert steps["client"]["package_version"] == client.locked_version()


@pytest.mark.parametrize("client", MATRIX, ids=lambda client: client.name)
def test_the_client_runs_the_scenario_against_a_served_instance(
    client, server, allow_private, webhook_key, receiver, tmp_path
):
    require(client)
    endpoint = create_endpoint(url=receiver.url, enabled_events=["refund.created"])

    steps = scenario(client, "run", {"STRIPE_API_BASE": server.url, **keys()}, server)

    assert [step for step in steps if step in STEPS] == STEPS
    told = steps["client"]
    assert (told["language"], told["package_version"]) == (client.language, client.locked_version())
    pinned = client.pinned_api_version()
    assert told["sent"] == pinned
    if "sent" in steps:  # Node: what its `request` events say went out
        assert steps["sent"]["api_versions"] == [pinned]
    answered = {version for step in steps.values() for version in step.get("answered", [])}
    assert answered == {pinned}, f"asked for {pinned}; answered in {answered}"
    assert steps["declined"]["decline_code"] == "simulated_decline"

    verify_a_delivery(client, receiver, steps["partial_refund"]["id"], endpoint.secret, tmp_path)
    assert_ledger_invariants()
