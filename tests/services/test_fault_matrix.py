"""The fault matrix, on PostgreSQL: a process killed at every step of reserve -> dispatch ->
settle, for refunds and for charges; the database connection cut mid-transaction, just
before COMMIT and just after it; the provider failing with 5xx or answering past the
timeout. After each: restart, reconcile, the client retries with its key, and then

- nothing a client was told succeeded is lost, and its retry gets the same object;
- one refund (or charge) per key, one provider refund (or charge) per ledger one;
- never over-refunded, `amount_refunded` equals the live refunds, the books verify.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test import Client

from ledger_app import faults
from ledger_app.access.api_keys import create_api_key
from ledger_app.admin.form_keys import new_form_key
from ledger_app.admin.forms import BulkRefundForm
from ledger_app.charges.selectors import charge_state
from ledger_app.charges.services import create_charge
from ledger_app.idempotency.services import ADMIN_BULK_KEYS
from ledger_app.models import Charge, LedgerEntry, Refund
from ledger_app.provider.dispatch import reconcile_charges, reconcile_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderCharge, ProviderRefund
from tests import tally
from tests.factories import ChargeFactory
from tests.gateways.stripe_stub import StripeStub
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import kill_at, run_command
from tests.second_factor import verified

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_AT = {  # is the new refund or charge in the database once the process dies there?
    "refund.reserve_locked": False,
    "charge.create_locked": False,
}
APPLIED_AT = {  # has the provider acted once the process dies there?
    "refund.after_provider_call",
    "refund.settle_locked",
    "refund.settled",
    "charge.after_provider_call",
    "charge.settle_locked",
    "charge.settled",
}
FORM = "application/x-www-form-urlencoded"
INLINE = {"REFUND_DISPATCH": "inline", "REFUND_DISPATCH_LEASE_SECONDS": "1"}


def check_everything() -> None:
    assert_ledger_invariants()
    assert_provider_agrees()
    call_command("verify_ledger", stdout=open("/dev/null", "w"))  # noqa: SIM115 - raises on drift
    tally.add("faults", invariant_checks=3)


def test_the_matrix_covers_every_checkpoint_in_the_code():
    """A checkpoint added to the code without a place in the matrix fails here."""
    found = set()
    for path in (ROOT / "ledger_app").rglob("*.py"):
        # checkpoint("name"), or a name handed to one: before_call_point="name"
        found |= set(re.findall(r'(?:checkpoint\(|_point=)"([a-z_.]+)"', path.read_text()))
    assert found == set(faults.POINTS)


# --- processes killed at every step --------------------------------------------------


@pytest.mark.parametrize("point", faults.REFUND_POINTS)
def test_refund_process_killed_at_every_step(inline_dispatch, point):
    charge = ChargeFactory(amount=5_000)
    told = create_refund(
        RefundRequest(charge_id=charge.id, amount=500, idempotency_key="told-first")
    ).item
    assert told.status == "succeeded"  # a refund the client was told about, before the crash
    request = ("refund", charge.id, "--amount", "1200", "--idempotency-key", "crash-key")

    kill_at(point, *request, **INLINE)

    crashed = Refund.objects.filter(charge=charge, amount=1_200).first()
    assert (crashed is not None) == COMMITTED_AT.get(point, True), point
    assert ProviderRefund.objects.count() == 1 + (point in APPLIED_AT)
    charge.refresh_from_db()
    assert charge.amount_refunded == 500 + (1_200 if crashed else 0)  # reserved, not lost
    assert_ledger_invariants()

    time.sleep(1.1)  # the dead process's lease runs out
    restarted = run_command("process_refunds", "--once", "--lease-seconds", "1", env=INLINE)
    reconciled = run_command("reconcile", env=INLINE)
    retried = run_command(*request, env=INLINE)  # the client asks again with its key

    assert [restarted.returncode, reconciled.returncode] == [0, 0], restarted.stderr
    assert retried.returncode == 0, retried.stderr
    refund_id, amount, _currency, status, *rest = retried.stdout.split()
    assert (int(amount), status) == (1_200, "succeeded")
    assert ("(replayed)" in rest) == (crashed is not None)
    assert crashed is None or refund_id == crashed.id
    refunds = Refund.objects.filter(charge=charge).order_by("created_at")
    assert [(r.id, r.status) for r in refunds] == [
        (told.id, "succeeded"),
        (refund_id, "succeeded"),
    ]
    assert ProviderRefund.objects.filter(idempotency_key=f"refund:{refund_id}").count() == 1
    assert ProviderRefund.objects.count() == 2
    charge.refresh_from_db()
    assert charge.amount_refunded == 1_700
    check_everything()
    tally.add("faults", faults=1, operations=5)


CHARGE_SCRIPT = (
    "from ledger_app.charges.services import create_charge; "
    "c = create_charge(amount=3000, currency='usd', idempotency_key='crash-charge'); "
    "print(c.item.id, c.item.status, c.replayed)"
)


@pytest.mark.parametrize("point", faults.CHARGE_POINTS)
def test_charge_process_killed_at_every_step(point):
    told = create_charge(amount=900, currency="usd", idempotency_key="told-charge").item
    assert told.status == "succeeded"

    kill_at(point, "shell", "-c", CHARGE_SCRIPT, REFUND_DISPATCH_LEASE_SECONDS="1")

    crashed = Charge.objects.filter(amount=3_000).first()
    assert (crashed is not None) == COMMITTED_AT.get(point, True), point
    assert ProviderCharge.objects.count() == 1 + (point in APPLIED_AT)

    time.sleep(1.1)  # the dead process's lease on the charge runs out
    reconciled = run_command("reconcile", "--lease-seconds", "0")
    retried = run_command("shell", "-c", CHARGE_SCRIPT)

    assert reconciled.returncode == 0, reconciled.stderr
    assert retried.returncode == 0, retried.stderr
    charge_id, status, replayed = retried.stdout.splitlines()[-1].split()
    assert status == "succeeded"
    assert replayed == str(crashed is not None)
    assert crashed is None or charge_id == crashed.id
    assert sorted(Charge.objects.values_list("id", "status")) == sorted(
        [(told.id, "succeeded"), (charge_id, "succeeded")]
    )
    assert ProviderCharge.objects.filter(idempotency_key=f"charge:{charge_id}").count() == 1
    assert ProviderCharge.objects.count() == 2
    entries = LedgerEntry.objects.filter(charge_id=charge_id, kind="charge_succeeded")
    assert entries.count() == 1
    check_everything()
    tally.add("faults", faults=1, operations=4)


# --- the database connection cut ----------------------------------------------------


def terminate_backend(pid: int) -> None:
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.fixture
def cut_connection(monkeypatch):
    """cut_connection(point, when): at checkpoint `point`, this process's database
    connection is terminated: `mid_transaction` right there; `before_commit` as the COMMIT
    is about to be sent (it rolls back); `after_commit` once the COMMIT has been applied
    but before its answer arrives (the client sees an error for what did commit)."""
    fired: list[str] = []
    real_checkpoint = faults.checkpoint

    def arm(point: str, when: str) -> list[str]:
        def checkpoint(name: str) -> None:
            real_checkpoint(name)
            if name != point or fired:
                return
            fired.append(name)
            pid = connection.connection.info.backend_pid
            if when == "mid_transaction":
                terminate_backend(pid)
                return
            # The wrapper's private _commit, which django-stubs do not describe.
            wrapper: Any = connection
            original = wrapper._commit

            def commit():
                del wrapper._commit  # once only
                if when == "before_commit":
                    terminate_backend(pid)
                    return original()
                original()
                terminate_backend(pid)
                raise OperationalError("server closed the connection unexpectedly")

            wrapper._commit = commit

        monkeypatch.setattr(faults, "checkpoint", checkpoint)
        return fired

    return arm


CUTS = ["mid_transaction", "before_commit", "after_commit"]


@pytest.fixture
def api_client(inline_dispatch, settings):
    settings.REFUND_DISPATCH_LEASE_SECONDS = 0  # a refund left pending is stale at once
    client = Client()
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {create_api_key(name='faults')[1]}"
    return client


def post(client: Client, path: str, data: dict, key: str):
    return client.post(path, urlencode(data), content_type=FORM, HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.parametrize("when", CUTS)
@pytest.mark.parametrize("point", ["refund.reserve_locked", "refund.settle_locked"])
def test_refund_with_its_connection_cut(api_client, cut_connection, point, when):
    charge = ChargeFactory(amount=4_000)
    told = post(api_client, "/v1/refunds", {"charge": charge.id, "amount": "300"}, "told")
    assert told.status_code == 200 and told.json()["status"] == "succeeded"
    fired = cut_connection(point, when)

    first = post(api_client, "/v1/refunds", {"charge": charge.id, "amount": "700"}, "cut")

    assert fired == [point]
    if point == "refund.reserve_locked":  # the client's own transaction was cut
        assert first.status_code == 503, first.content
        assert first.json()["error"]["code"] == "database_unavailable"
        assert first["Stripe-Should-Retry"] == "true"
        committed = when == "after_commit"
    else:  # the reservation committed; only its settlement was cut
        assert first.status_code == 200, first.content
        assert first.json()["status"] == "pending"  # accepted; the outcome comes later
        committed = True
    assert Refund.objects.filter(charge=charge, amount=700).exists() == committed
    assert_ledger_invariants()

    call_command("reconcile", stdout=open("/dev/null", "w"))  # noqa: SIM115
    again = post(api_client, "/v1/refunds", {"charge": charge.id, "amount": "700"}, "cut")

    assert again.status_code == 200, again.content
    assert again.json()["status"] == "succeeded"
    assert (again.get("Idempotent-Replayed") == "true") == committed
    if first.status_code == 200:
        assert again.json()["id"] == first.json()["id"]
    assert sorted(Refund.objects.filter(charge=charge).values_list("amount", "status")) == [
        (300, "succeeded"),
        (700, "succeeded"),
    ]
    assert ProviderRefund.objects.count() == 2
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 1_000
    check_everything()
    tally.add("faults", faults=1, operations=4)


@pytest.mark.parametrize("when", CUTS)
@pytest.mark.parametrize("point", ["charge.create_locked", "charge.settle_locked"])
def test_charge_with_its_connection_cut(api_client, cut_connection, settings, point, when):
    fired = cut_connection(point, when)
    body = {"amount": "2500", "currency": "usd", "source": "tok_visa"}

    first = post(api_client, "/v1/charges", body, "charge-cut")

    assert fired == [point]
    if point == "charge.create_locked":
        assert first.status_code == 503, first.content
        assert first.json()["error"]["code"] == "database_unavailable"
        committed = when == "after_commit"
    else:
        assert first.status_code == 200, first.content
        assert first.json()["status"] == "pending"
        committed = True
    assert Charge.objects.filter(amount=2_500).exists() == committed

    call_command("reconcile", "--lease-seconds", "0", stdout=open("/dev/null", "w"))  # noqa: SIM115
    again = post(api_client, "/v1/charges", body, "charge-cut")

    assert again.status_code == 200, again.content
    assert again.json()["status"] == "succeeded"
    assert (again.get("Idempotent-Replayed") == "true") == committed
    [charge] = Charge.objects.all()
    assert charge.id == again.json()["id"] and charge.status == "succeeded"
    assert ProviderCharge.objects.filter(idempotency_key=f"charge:{charge.id}").count() == 1
    check_everything()
    tally.add("faults", faults=1, operations=3)


# --- the provider failing: 5xx, and answers past the timeout -------------------------


@pytest.fixture
def stripe_stub(settings, inline_dispatch):
    with StripeStub(sleep_seconds=0.6) as stub:
        settings.LEDGER_GATEWAY = "stripe"
        settings.STRIPE_API_KEY = "sk_test_faults"
        settings.STRIPE_API_BASE = stub.url
        settings.GATEWAY_TIMEOUT_SECONDS = 0.3
        settings.REFUND_DISPATCH_LEASE_SECONDS = 0
        yield stub


@pytest.mark.parametrize("behaviour", ["500", "503", "apply_then_500", "sleep"])
def test_refund_through_a_failing_provider(stripe_stub, behaviour):
    provider_charge = stripe_stub.add_charge(amount=2_000)
    charge = ChargeFactory(amount=2_000)
    Charge.objects.filter(pk=charge.pk).update(provider_charge_id=provider_charge)
    stripe_stub.script("POST", "/v1/refunds", behaviour)

    refund = create_refund(
        RefundRequest(charge_id=charge.id, amount=800, idempotency_key="flaky")
    ).item

    assert refund.status == "unknown"  # never failed: the provider may have acted
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 800  # still reserved
    if behaviour == "sleep":
        time.sleep(0.4)  # the late answer lands at the provider

    reconcile_refunds()

    refund.refresh_from_db()
    assert refund.status == "succeeded"
    assert len(stripe_stub.refunds) == 1
    [applied] = stripe_stub.refunds.values()
    assert (applied["amount"], applied["charge"]) == (800, provider_charge)
    assert create_refund(
        RefundRequest(charge_id=charge.id, amount=800, idempotency_key="flaky")
    ).replayed
    assert_ledger_invariants()
    tally.add("faults", faults=1, operations=3, invariant_checks=1)


@pytest.mark.parametrize("behaviour", ["500", "apply_then_500", "sleep"])
def test_charge_through_a_failing_provider(stripe_stub, behaviour):
    stripe_stub.script("POST", "/v1/charges", behaviour)

    charge = create_charge(amount=1_500, currency="usd", idempotency_key="flaky-charge").item

    assert charge.status == "unknown"
    if behaviour == "sleep":
        time.sleep(0.4)

    reconcile_charges(lease_seconds=0)

    charge.refresh_from_db()
    assert charge.status == "succeeded"
    assert len(stripe_stub.charges) == 1
    assert create_charge(amount=1_500, currency="usd", idempotency_key="flaky-charge").replayed
    assert_ledger_invariants()
    tally.add("faults", faults=1, operations=3, invariant_checks=1)


def test_a_keyless_client_whose_connection_is_cut_is_told_not_to_retry_blindly(
    api_client, cut_connection
):
    """Without an Idempotency-Key a retry could be a second refund: the client is told to
    look first, and Stripe's client does not retry (Stripe-Should-Retry: false)."""
    charge = ChargeFactory(amount=4_000)
    cut_connection("refund.reserve_locked", "after_commit")

    response = api_client.post(
        "/v1/refunds", urlencode({"charge": charge.id, "amount": "700"}), content_type=FORM
    )

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response["Stripe-Should-Retry"] == "false"
    assert "no Idempotency-Key" in response.json()["error"]["message"]
    assert "Retry-After" not in response
    [refund] = Refund.objects.filter(charge=charge)  # it did commit: one, found by listing
    listed = api_client.get(f"/v1/refunds?charge={charge.id}")
    assert [r["id"] for r in listed.json()["data"]] == [refund.id]
    call_command("reconcile", stdout=open("/dev/null", "w"))  # noqa: SIM115
    check_everything()
    tally.add("faults", faults=1, operations=2)


def test_a_bug_in_a_query_is_a_500_not_a_retryable_503(api_client, monkeypatch):
    from django.db import ProgrammingError

    from ledger_app.api import refunds as refund_views

    def broken(request):
        raise ProgrammingError('relation "ledger_app_refund" does not exist')

    monkeypatch.setattr(refund_views, "create_refund", broken)
    charge = ChargeFactory(amount=1_000)

    response = post(api_client, "/v1/refunds", {"charge": charge.id, "amount": "10"}, "bug")

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "Stripe-Should-Retry" not in response


@pytest.fixture
def admin_refunder(inline_dispatch, django_user_model, settings):
    """A logged-in staff client with the refund permission (granted directly: the two this
    test needs)."""
    from django.contrib.auth.models import Permission

    settings.REFUND_DISPATCH_LEASE_SECONDS = 0  # a refund left pending is stale at once
    agent = django_user_model.objects.create_user("cut-agent", password="x-pass-1234567")
    agent.is_staff = True
    agent.save()
    agent.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_charge", "refund_charge"])
    )
    return verified(Client(), agent)


@pytest.mark.parametrize("when", CUTS)
def test_an_admin_refund_whose_connection_is_cut_is_finished_by_submitting_again(
    admin_refunder, cut_connection, when
):
    from django.contrib.admin.utils import quote

    client = admin_refunder
    charge = ChargeFactory(amount=3_000)
    url = f"/admin/ledger_app/charge/{quote(charge.pk)}/refund/"
    key = new_form_key()  # as the form issues it: signed
    form = {
        "amount": "4.00",
        "reason": "duplicate",
        "idempotency_key": key,
        "charge_state": charge_state(charge.pk),
    }
    cut_connection("refund.reserve_locked", when)

    first = client.post(url, form)

    assert first.status_code == 200  # the form again, not a server error
    page = first.content.decode()
    assert "database_unavailable" in page and f'value="{key}"' in page
    committed = when == "after_commit"
    assert Refund.objects.filter(charge=charge).count() == int(committed)

    again = client.post(url, form)  # what the page tells staff to do

    assert again.status_code == 302
    [refund] = Refund.objects.filter(charge=charge)
    assert (refund.amount, refund.status) == (400, "succeeded" if not committed else "pending")
    call_command("reconcile", stdout=open("/dev/null", "w"))  # noqa: SIM115
    refund.refresh_from_db()
    assert refund.status == "succeeded"
    assert ProviderRefund.objects.count() == 1
    check_everything()
    tally.add("faults", faults=1, operations=3)


def test_a_bulk_refund_whose_connection_is_cut_is_finished_by_confirming_again(
    admin_refunder, cut_connection
):
    client = admin_refunder
    charges = [ChargeFactory(amount=1_000 * (n + 1)) for n in range(3)]
    confirmation = {
        "action": "refund_in_full",
        "_selected_action": [c.pk for c in charges],
        "post": "yes",
        "batch_key": new_form_key(ADMIN_BULK_KEYS),
        "confirmed": BulkRefundForm.sign({c.pk: (charge_state(c.pk), c.amount) for c in charges}),
        "reason": "duplicate",
        "note": "duplicate order batch",
    }
    cut_connection("refund.reserve_locked", "after_commit")  # the first charge's refund

    first = client.post("/admin/ledger_app/charge/", confirmation, follow=True)

    shown = " ".join(str(m) for m in first.context["messages"])
    assert first.status_code == 200
    assert "database_unavailable" in shown and "Refunded:" in shown
    assert Refund.objects.count() == 3  # the cut one committed; the others went through

    again = client.post("/admin/ledger_app/charge/", confirmation, follow=True)

    shown = " ".join(str(m) for m in again.context["messages"])
    assert "replayed" in shown and "database_unavailable" not in shown
    assert Refund.objects.count() == 3
    call_command("reconcile", stdout=open("/dev/null", "w"))  # noqa: SIM115
    for charge in Charge.objects.all():
        assert charge.amount_refunded == charge.amount
    assert set(Refund.objects.values_list("status", flat=True)) == {"succeeded"}
    assert ProviderRefund.objects.count() == 3
    check_everything()
    tally.add("faults", faults=1, operations=6)
