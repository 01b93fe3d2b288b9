"""The Stripe adapter against a local imitation of Stripe's wire format (no database)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledger_app.provider.gateways.base import (
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyConflict,
    OutcomeUnknown,
    ProviderAnswer,
)
from ledger_app.provider.gateways.stripe import StripeGateway
from tests.gateways.stripe_stub import StripeStub

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHORT_TIMEOUT = 0.3


@pytest.fixture
def stub():
    with StripeStub(sleep_seconds=1.0) as running:
        yield running


@pytest.fixture
def gateway(stub):
    return StripeGateway(api_key="sk_test_stub", api_base=stub.url)


@pytest.fixture
def charge_id(stub):
    return stub.add_charge(amount=1000, ledger_charge_id="lc_1")


def send_refund(gateway, charge_id, *, key="rk_1", amount=300, refund_id="rf_1", timeout=2.0):
    return gateway.refund(
        provider_key=key,
        charge_reference=charge_id,
        amount=amount,
        currency="usd",
        metadata={"ledger_refund_id": refund_id, "ledger_charge_id": "lc_1"},
        timeout=timeout,
    )


def lookup_refund(gateway, charge_id, *, key="rk_1", refund_id="rf_1"):
    return gateway.lookup_refund(
        provider_key=key, charge_reference=charge_id, ledger_refund_id=refund_id
    )


def send_charge(gateway, *, key="ck_1", charge_id="lc_9", timeout=2.0, **metadata):
    return gateway.charge(
        provider_key=key,
        amount=2500,
        currency="USD",
        description="Order 17",
        metadata={"ledger_charge_id": charge_id, **metadata},
        timeout=timeout,
    )


def lookup_charge(gateway, *, key="ck_1", charge_id="lc_9"):
    return gateway.lookup_charge(provider_key=key, ledger_charge_id=charge_id)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- refunds: what is sent ---------------------------------------------------------------


def test_refund_sends_the_provider_key_as_idempotency_key_and_ledger_ids_as_metadata(
    stub, gateway, charge_id
):
    answer = send_refund(gateway, charge_id, key="rk_abc", refund_id="rf_42")

    [request] = stub.calls("POST", "/v1/refunds")
    assert request["key"] == "rk_abc"
    assert request["params"] == {
        "charge": charge_id,
        "amount": "300",
        "metadata": {"ledger_refund_id": "rf_42", "ledger_charge_id": "lc_1"},
    }
    [refund] = stub.refunds.values()
    assert answer == ProviderAnswer("succeeded", refund["id"])


def test_a_retry_after_an_applied_refund_lost_its_answer_reuses_the_key_and_refunds_once(
    stub, gateway, charge_id
):
    stub.script("POST", "/v1/refunds", "apply_then_500")
    with pytest.raises(GatewayUnavailable):
        send_refund(gateway, charge_id)

    answer = send_refund(gateway, charge_id)

    assert len(stub.refunds) == 1
    assert [r["key"] for r in stub.calls("POST", "/v1/refunds")] == ["rk_1", "rk_1"]
    assert answer == ProviderAnswer("succeeded", next(iter(stub.refunds)))


def test_two_processes_sending_the_same_refund_make_one_refund(stub, charge_id):
    script = textwrap.dedent(
        """
        import json, sys
        import django
        django.setup()
        from ledger_app.provider.gateways.base import OutcomeUnknown
        from ledger_app.provider.gateways.stripe import StripeGateway
        gateway = StripeGateway(api_key="sk_test_stub", api_base=sys.argv[1])
        try:
            answer = gateway.refund(
                provider_key="rk_shared", charge_reference=sys.argv[2], amount=300,
                currency="usd", metadata={"ledger_refund_id": "rf_shared"}, timeout=5,
            )
            print(json.dumps([answer.verdict, answer.provider_id]))
        except OutcomeUnknown:
            print(json.dumps(["unknown", ""]))
        """
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "backoffice.settings"}
    stub.script("POST", "/v1/refunds", "apply_then_500")  # the first process loses its answer

    answers = [
        json.loads(
            subprocess.run(  # our own interpreter and script
                [sys.executable, "-c", script, stub.url, charge_id],
                cwd=PROJECT_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        )
        for _ in range(2)
    ]

    assert len(stub.refunds) == 1
    assert [r["key"] for r in stub.calls("POST", "/v1/refunds")] == ["rk_shared", "rk_shared"]
    assert answers == [["unknown", ""], ["succeeded", next(iter(stub.refunds))]]


# --- refunds: what an answer means -------------------------------------------------------


def test_timeout_is_unknown_not_declined(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "sleep")

    with pytest.raises(GatewayTimeout):
        send_refund(gateway, charge_id, timeout=SHORT_TIMEOUT)


def test_connection_refused_is_unknown_not_declined(charge_id):
    gateway = StripeGateway(api_key="sk_test_stub", api_base=f"http://127.0.0.1:{closed_port()}")

    with pytest.raises(GatewayUnavailable):
        send_refund(gateway, charge_id)


def test_server_error_is_unknown_and_not_retried_by_the_client(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "500")

    with pytest.raises(GatewayUnavailable):
        send_refund(gateway, charge_id)

    assert len(stub.calls("POST", "/v1/refunds")) == 1
    assert stub.refunds == {}


@pytest.mark.parametrize("status", ["409", "429", "502", "503"])
def test_other_provider_errors_are_unknown_not_declined(stub, gateway, charge_id, status):
    stub.script("POST", "/v1/refunds", status)

    with pytest.raises(GatewayUnavailable, match=f"HTTP {status}"):
        send_refund(gateway, charge_id)


def test_rejected_api_key_is_unknown_not_declined(stub, charge_id):
    gateway = StripeGateway(api_key="rk_wrong", api_base=stub.url)

    with pytest.raises(GatewayUnavailable, match="AuthenticationError"):
        send_refund(gateway, charge_id)


def test_same_key_with_other_params_is_unknown_not_declined(stub, gateway, charge_id):
    send_refund(gateway, charge_id, amount=300)

    with pytest.raises(IdempotencyKeyConflict):
        send_refund(gateway, charge_id, amount=400)
    assert len(stub.refunds) == 1


def test_card_error_is_declined_with_its_code(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "card_error")

    assert send_refund(gateway, charge_id) == ProviderAnswer(
        "declined", decline_reason="card_declined"
    )


def test_invalid_request_is_declined_with_its_code(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "already_refunded")

    assert send_refund(gateway, charge_id) == ProviderAnswer(
        "declined", decline_reason="charge_already_refunded"
    )
    assert stub.refunds == {}


def test_refund_of_an_unknown_charge_is_declined_as_resource_missing(stub, gateway):
    answer = send_refund(gateway, "ch_missing")

    assert answer == ProviderAnswer("declined", decline_reason="resource_missing")


@pytest.mark.parametrize(
    ("status", "reason"), [("failed", "expired_or_canceled_card"), ("canceled", "canceled")]
)
def test_failed_or_canceled_refund_is_declined(stub, gateway, charge_id, status, reason):
    stub.script("POST", "/v1/refunds", status)

    answer = send_refund(gateway, charge_id)

    assert answer == ProviderAnswer("declined", next(iter(stub.refunds)), reason)


@pytest.mark.parametrize("status", ["pending", "requires_action"])
def test_refund_still_processing_is_unknown_not_declined(stub, gateway, charge_id, status):
    stub.script("POST", "/v1/refunds", status)

    with pytest.raises(OutcomeUnknown, match=status):
        send_refund(gateway, charge_id)
    with pytest.raises(OutcomeUnknown, match=status):
        lookup_refund(gateway, charge_id)


# --- refunds: lookups --------------------------------------------------------------------


def test_lookup_finds_a_refund_applied_after_its_answer_was_lost(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "apply_then_500")
    with pytest.raises(OutcomeUnknown):
        send_refund(gateway, charge_id, refund_id="rf_lost")
    send_refund(gateway, charge_id, key="rk_other", refund_id="rf_other", amount=100)

    answer = lookup_refund(gateway, charge_id, refund_id="rf_lost")

    [lost] = [r for r in stub.refunds.values() if r["metadata"]["ledger_refund_id"] == "rf_lost"]
    assert answer == ProviderAnswer("succeeded", lost["id"])
    [listing] = stub.calls("GET", "/v1/refunds")
    assert listing["params"]["charge"] == charge_id


def test_lookup_finds_a_refund_applied_after_a_timeout(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "sleep")
    with pytest.raises(GatewayTimeout):
        send_refund(gateway, charge_id, timeout=SHORT_TIMEOUT)

    assert lookup_refund(gateway, charge_id).verdict == "succeeded"


def test_lookup_returns_none_when_the_refund_was_never_applied(stub, gateway, charge_id):
    stub.script("POST", "/v1/refunds", "500")
    with pytest.raises(OutcomeUnknown):
        send_refund(gateway, charge_id)
    send_refund(gateway, charge_id, key="rk_other", refund_id="rf_other", amount=100)

    assert lookup_refund(gateway, charge_id) is None


def test_lookup_is_unknown_when_stripe_cannot_answer(stub, gateway, charge_id):
    stub.script("GET", "/v1/refunds", "500")

    with pytest.raises(OutcomeUnknown):
        lookup_refund(gateway, charge_id)


def test_lookup_is_unknown_when_stripe_is_unreachable(charge_id):
    gateway = StripeGateway(api_key="sk_test_stub", api_base=f"http://127.0.0.1:{closed_port()}")

    with pytest.raises(OutcomeUnknown):
        lookup_refund(gateway, charge_id)


def test_lookup_pages_through_all_of_a_charges_refunds(stub, gateway, charge_id):
    gateway.page_size = 2
    for n in range(5):  # rf_0 is the oldest, so it is on the last page
        send_refund(gateway, charge_id, key=f"rk_{n}", refund_id=f"rf_{n}", amount=100)

    answer = lookup_refund(gateway, charge_id, refund_id="rf_0")

    oldest = next(iter(stub.refunds.values()))
    assert oldest["metadata"]["ledger_refund_id"] == "rf_0"
    assert answer == ProviderAnswer("succeeded", oldest["id"])
    assert len(stub.calls("GET", "/v1/refunds")) == 3


# --- charges -----------------------------------------------------------------------------


def test_charge_sends_key_amount_currency_metadata_and_the_test_source(stub, gateway):
    answer = send_charge(gateway, key="ck_abc")

    [request] = stub.calls("POST", "/v1/charges")
    assert request["key"] == "ck_abc"
    assert request["params"] == {
        "amount": "2500",
        "currency": "usd",
        "description": "Order 17",
        "metadata": {"ledger_charge_id": "lc_9"},
        "source": "tok_visa",
    }
    [charge] = stub.charges.values()
    assert answer == ProviderAnswer("succeeded", charge["id"])


def test_charge_takes_its_source_from_metadata_without_storing_it_there(stub, gateway):
    send_charge(gateway, source="tok_mastercard")

    [request] = stub.calls("POST", "/v1/charges")
    assert request["params"]["source"] == "tok_mastercard"
    assert request["params"]["metadata"] == {"ledger_charge_id": "lc_9"}


def test_a_charge_retry_after_a_lost_answer_charges_once(stub, gateway):
    stub.script("POST", "/v1/charges", "apply_then_500")
    with pytest.raises(OutcomeUnknown):
        send_charge(gateway)

    answer = send_charge(gateway)

    assert len(stub.charges) == 1
    assert [r["key"] for r in stub.calls("POST", "/v1/charges")] == ["ck_1", "ck_1"]
    assert answer == ProviderAnswer("succeeded", next(iter(stub.charges)))


def test_card_error_declines_the_charge_and_lookup_finds_it_declined(stub, gateway):
    stub.script("POST", "/v1/charges", "card_error")

    answer = send_charge(gateway)

    [failed] = stub.charges.values()
    assert answer == ProviderAnswer("declined", failed["id"], "card_declined")
    assert lookup_charge(gateway) == ProviderAnswer("declined", failed["id"], "card_declined")


def test_charge_timeout_is_unknown_and_lookup_finds_the_charge(stub, gateway):
    stub.script("POST", "/v1/charges", "sleep")
    with pytest.raises(GatewayTimeout):
        send_charge(gateway, timeout=SHORT_TIMEOUT)

    answer = lookup_charge(gateway)

    [charge] = stub.charges.values()
    assert answer == ProviderAnswer("succeeded", charge["id"])
    [search] = stub.calls("GET", "/v1/charges/search")
    assert search["params"]["query"] == "metadata['ledger_charge_id']:'lc_9'"


def test_pending_charge_is_unknown_not_declined(stub, gateway):
    stub.script("POST", "/v1/charges", "pending")

    with pytest.raises(OutcomeUnknown, match="pending"):
        send_charge(gateway)


def test_charge_lookup_returns_none_when_no_charge_was_made(stub, gateway):
    stub.script("POST", "/v1/charges", "500")
    with pytest.raises(OutcomeUnknown):
        send_charge(gateway)
    send_charge(gateway, key="ck_other", charge_id="lc_other")

    assert lookup_charge(gateway) is None


def test_charge_lookup_is_unknown_when_stripe_cannot_answer(stub, gateway):
    stub.script("GET", "/v1/charges/search", "503")

    with pytest.raises(OutcomeUnknown):
        lookup_charge(gateway)
