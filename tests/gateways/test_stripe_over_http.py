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
  there is one provider refund per ledger refund and verify_ledger agrees on both sides;
- sync_provider's lists, page by page: charges and refunds, and the books' balance
  transactions and payouts (with each payout's own list), mirrored equal to the provider's.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.db import connection, transaction
from django.test import override_settings

from ledger_app.books.models import BalanceTransaction, Payout
from ledger_app.charges.services import record_charge
from ledger_app.mirror.events_in import apply_object
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import Charge, Refund
from ledger_app.provider.dispatch import reconcile_refunds
from ledger_app.provider.dispatch.send import send_refund
from ledger_app.provider.gateways import get_gateway
from ledger_app.provider.gateways.base import GatewayUnavailable, Listed, OutcomeUnknown
from ledger_app.provider.gateways.stripe import StripeGateway
from ledger_app.refunds.services import RefundRequest, create_refund
from ledger_app.rendering.books import render_balance_transaction, render_payout
from tests.gateways.provider_back_office import MIRRORED, ProviderBackOffice
from tests.invariants import assert_ledger_invariants
from tests.processes import run_command

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


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


class WithoutDisputes(StripeGateway):
    """The adapter, but for the provider instance's disputes: a back office keeps disputes
    on their charges and serves no /v1/disputes, which sync_provider also walks."""

    def list_created(self, kind: Listed, *, start: datetime, end: datetime) -> list[dict]:
        return [] if kind == "dispute" else super().list_created(kind, start=start, end=end)


def requests_sent(monkeypatch) -> list[str]:
    """The URL of every request the stripe package sends from now on."""
    sent: list[str] = []
    send = requests.Session.request

    def counted(session, method, url, *args, **kwargs):
        sent.append(url)
        return send(session, method, url, *args, **kwargs)

    monkeypatch.setattr(requests.Session, "request", counted)
    return sent


def money_moved_and_paid_out(provider: ProviderBackOffice) -> datetime:
    """Charges and a refund through the provider's API, booked by its simulated provider,
    which pays them out at once (no delay) when the provider's own sync_provider lists
    them; when the first charge was made."""
    provider.running.stop()
    provider.start(SIMULATED_PAYOUT_DELAY_DAYS="0")
    client = provider.client()
    made = [
        client.v1.charges.create(params={"amount": amount, "currency": "usd", "source": "tok_visa"})
        for amount in (1_000, 2_000, 3_000)
    ]
    client.v1.refunds.create(params={"charge": made[0].id, "amount": 400})
    first = datetime.fromtimestamp(min(c.created for c in made), tz=UTC)
    provider.sync(since=first.date())
    # A payout the run made after the moment it lists up to is listed by the next run.
    synced = provider.sync(since=first.date())
    assert "5 balance transactions, 1 payouts" in synced, synced
    return first


def test_books_list_over_http_page_by_page_and_sync_mirrors_them(provider, monkeypatch):
    """The adapter's list calls for the books (list_created of balance transactions and
    payouts, list_paid_out) through the stripe package against the provider instance's
    /v1/balance_transactions and /v1/payouts; our sync_provider then mirrors them, equal to
    the provider's own mirror of its simulated provider's books."""
    start = money_moved_and_paid_out(provider)
    end = start + timedelta(hours=1)
    monkeypatch.setattr(StripeGateway, "page_size", 2)  # five transactions: three pages
    gateway = WithoutDisputes(api_key=provider.api_key, api_base=provider.running.url)
    sent = requests_sent(monkeypatch)

    moved = gateway.list_created("balance_transaction", start=start, end=end)
    [payout] = gateway.list_created("payout", start=start, end=end)
    paid = gateway.list_paid_out(payout["id"])
    before = gateway.list_created("payout", start=start - timedelta(hours=1), end=start)

    assert sorted(bt["type"] for bt in moved) == ["charge"] * 3 + ["payout", "refund"]
    assert sorted(bt["id"] for bt in paid) == sorted(bt["id"] for bt in moved)
    pages = [url for url in sent if "/v1/balance_transactions?" in url]
    assert len(pages) == 6, pages  # three pages of the list, three of the payout's
    assert sum("starting_after=" in url for url in pages) == 4, pages
    assert payout["amount"] == 6_000 - 400 - sum(bt["fee"] for bt in moved) and before == []
    with pointed_at(provider):
        report = sync_provider(since=start, gateway=gateway)
        again = sync_provider(since=start, gateway=gateway)
    assert report is not None and again is not None
    assert (report.read["balance_transaction"], report.read["payout"]) == (5, 1)
    assert again.moved == 0  # what was mirrored is found again and changes nothing
    ours = BalanceTransaction.objects.order_by("pk").values_list(*MIRRORED)
    assert list(ours) == provider.balance_transactions()
    assert {bt.payout for bt in BalanceTransaction.objects.all()} == {payout["id"]}
    assert render_payout(Payout.objects.get()) == payout
    for shown in moved:
        assert render_balance_transaction(BalanceTransaction.objects.get(pk=shown["id"])) == shown
    assert Charge.objects.count() == 3 and Refund.objects.get().source == "provider"
    assert_ledger_invariants()
