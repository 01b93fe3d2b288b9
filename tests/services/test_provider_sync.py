"""sync_provider catches up with the provider when its webhooks were lost: one run brings
the back office to the provider's books (every charge, refund and status), a second run
changes nothing, and a run killed halfway is finished by the next (ledger_app/mirror/sync.py).
The provider is the simulated one, driven as a person would: payments and dashboard refunds
by its own commands, with their webhooks lost."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from ledger_app.charges.services import create_charge
from ledger_app.management.commands.process_refunds import Command as ProcessRefunds
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.mirror.models import ProviderSyncCursor
from ledger_app.mirror.sync import sync_provider
from ledger_app.models import Charge, Event, JobLease, LedgerEntry, Refund
from ledger_app.operations import job_leases
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider import news
from simulated_provider.models import ProviderCharge, ProviderRefund
from tests.concurrency import run_at_once
from tests.invariants import assert_ledger_invariants
from tests.processes import kill_at, run_command

pytestmark = pytest.mark.usefixtures("inline_dispatch")
LIVE_AT_PROVIDER = ("succeeded", "pending")


def pay(amount: int, *, hours_ago: float = 0) -> str:
    """A payment at the provider's checkout, its webhook lost; made `hours_ago`."""
    out = io.StringIO()
    call_command(
        "simulate_payment", "--amount", str(amount), "--currency", "usd", "--no-webhook", stdout=out
    )
    charge_id = out.getvalue().strip()
    _backdate(ProviderCharge, charge_id, hours_ago)
    return charge_id


def refund_there(charge_id: str, amount: int, *, hours_ago: float = 0) -> str:
    """A refund in the provider's own dashboard, its webhook lost."""
    out = io.StringIO()
    call_command(
        "simulate_provider_refund", charge_id, "--amount", str(amount), "--no-webhook", stdout=out
    )
    refund_id = out.getvalue().strip()
    _backdate(ProviderRefund, refund_id, hours_ago)
    return refund_id


def _backdate(model, provider_id: str, hours_ago: float) -> None:
    made = timezone.now() - timedelta(hours=hours_ago)
    model.objects.filter(provider_id=provider_id).update(created_at=made)


def assert_books_equal_the_providers() -> None:
    """Every charge and refund the provider holds is in the ledger, once, with its amount
    and status, and every charge's amount_refunded is what the provider refunded of it."""
    for there in ProviderCharge.objects.all():
        here = Charge.objects.get(pk__in=_known_as(there.provider_id))
        status = "failed" if there.status == "declined" else there.status
        assert (here.amount, here.currency, here.status) == (there.amount, there.currency, status)
        given = ProviderRefund.objects.filter(
            charge_reference=there.provider_id, status__in=LIVE_AT_PROVIDER
        ).aggregate(total=Sum("amount"))["total"]
        assert here.amount_refunded == (given or 0), here.pk
    for given_there in ProviderRefund.objects.filter(status__in=LIVE_AT_PROVIDER):
        [given_here] = Refund.objects.filter(provider_refund_id=given_there.provider_id)
        assert (given_here.amount, given_here.status) == (given_there.amount, given_there.status)
    assert_ledger_invariants()


def _known_as(provider_id: str) -> list[str]:
    return list(
        Charge.objects.filter(provider_charge_id=provider_id).values_list("pk", flat=True)
    ) or [provider_id]


def everything() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Charge, Refund, LedgerEntry, Event))


@pytest.fixture
def a_day_without_webhooks(db) -> dict[str, str]:
    """A simulated day at the provider with every webhook lost: three payments, refunds made
    in its dashboard (one of a charge made through the back office), and the back office's
    own charge and refund, which it already knows."""
    ours = create_charge(amount=5_000, currency="usd").item
    mine = create_refund(RefundRequest(charge_id=ours.pk, amount=1_000)).item
    day = {"first": pay(10_000, hours_ago=23), "second": pay(2_500, hours_ago=12)}
    day["third"] = pay(7_000, hours_ago=0.75)
    refund_there(day["first"], 6_000, hours_ago=20)
    refund_there(day["third"], 7_000, hours_ago=0.5)
    refund_there(ours.provider_charge_id, 1_500, hours_ago=0.2)
    day |= {"ours": ours.pk, "mine": mine.pk}
    return day


@pytest.mark.django_db
class TestOneRunCatchesUp:
    def test_a_day_of_lost_webhooks_is_caught_up_and_a_second_run_changes_nothing(
        self, a_day_without_webhooks
    ):
        assert not Charge.objects.filter(pk=a_day_without_webhooks["first"]).exists()
        since = (timezone.now() - timedelta(days=2)).date().isoformat()
        out = io.StringIO()

        call_command("sync_provider", "--since", since, stdout=out)

        assert_books_equal_the_providers()
        said = out.getvalue()
        assert (
            "read 4 charges, 4 refunds, 0 disputes, 8 balance transactions, 0 payouts; "
            "14 changed something, 0 ignored"
        ) in said
        assert f"charge {a_day_without_webhooks['first']} arrived from the provider" in said
        first = Charge.objects.get(pk=a_day_without_webhooks["first"])
        assert (first.amount_refunded, first.amount_refundable) == (6_000, 4_000)
        assert Charge.objects.get(pk=a_day_without_webhooks["third"]).refunded
        before = everything()

        again = io.StringIO()
        call_command("sync_provider", stdout=again)
        call_command("sync_provider", "--since", since, stdout=again)

        assert everything() == before
        assert again.getvalue().count("0 changed something") == 2

    def test_the_rest_refunded_after_the_sync_asks_the_provider_for_the_true_rest(
        self, a_day_without_webhooks
    ):
        call_command("sync_provider", "--since", "2026-01-01", stdout=io.StringIO())

        rest = create_refund(RefundRequest(charge_id=a_day_without_webhooks["first"])).item

        assert (rest.amount, rest.status) == (4_000, "succeeded")
        assert_books_equal_the_providers()

    def test_a_dry_run_says_what_it_would_do_and_writes_nothing(self, a_day_without_webhooks):
        before = everything()
        out = io.StringIO()

        call_command("sync_provider", "--since", "2026-01-01", "--dry-run", stdout=out)

        assert everything() == before and not ProviderSyncCursor.objects.exists()
        said = out.getvalue()
        assert f"would: charge {a_day_without_webhooks['second']} arrived" in said
        # Each alone: a refund of a charge that has not arrived yet is of an unknown charge.
        assert "12 would change something" in said  # 4 charges, 8 balance transactions

    def test_without_since_it_starts_one_interval_before_its_cursor(
        self, a_day_without_webhooks, settings
    ):
        settings.PROVIDER_SYNC_INTERVAL = 3_600  # an hour: only the third payment and later
        out = io.StringIO()

        call_command("sync_provider", stdout=out)

        assert Charge.objects.filter(pk=a_day_without_webhooks["third"]).exists()
        assert not Charge.objects.filter(pk=a_day_without_webhooks["second"]).exists()
        cursors = dict(ProviderSyncCursor.objects.values_list("kind", "synced_until"))
        assert set(cursors) == {"charge", "refund", "dispute", "balance_transaction", "payout"}
        assert max(cursors.values()) <= timezone.now() + timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_killed_halfway_the_next_run_finishes(a_day_without_webhooks):
    """A real process, SIGKILLed once its first window (a day of charges) is committed: the
    next run, once the dead run's lease has run out, goes on from the cursor."""
    since = (timezone.now() - timedelta(days=2)).date().isoformat()

    kill_at("sync.window_committed", "sync_provider", "--since", since)

    assert not Charge.objects.filter(pk=a_day_without_webhooks["first"]).exists()
    assert ProviderSyncCursor.objects.get(kind="charge").synced_until.isoformat() > since
    JobLease.objects.filter(pk="sync_provider").update(
        leased_until=timezone.now() - timedelta(seconds=1)  # as five minutes later
    )
    finished = run_command("sync_provider")

    assert finished.returncode == 0, finished.stderr
    assert_books_equal_the_providers()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_webhook_a_sync_and_an_agents_refund_of_one_charge_at_once(a_day_without_webhooks):
    """The provider's refund told three ways at once (its webhook, found by the sync, while
    an agent refunds the same charge): one ledger refund per provider refund."""
    charge_id = a_day_without_webhooks["second"]
    call_command("sync_provider", "--since", "2026-01-01", stdout=io.StringIO())
    made_there = refund_there(charge_id, 1_000)
    told = news.event_about(ProviderRefund.objects.get(provider_id=made_there), "refund.created")

    results = run_at_once(
        [
            lambda: apply_provider_event(told),
            lambda: sync_provider(since=timezone.now() - timedelta(hours=1)),
            lambda: create_refund(RefundRequest(charge_id=charge_id, amount=500)),
        ]
    )

    assert not [r for r in results if isinstance(r, Exception)], results
    if Charge.objects.get(pk=charge_id).provider_disagreement:  # told while ours was unanswered
        call_command("apply_provider_refunds", charge_id, stdout=io.StringIO())
    assert Refund.objects.filter(provider_refund_id=made_there).count() == 1
    assert_books_equal_the_providers()


@pytest.mark.django_db
class TestOneRunAtATime:
    def test_a_run_while_another_holds_the_job_does_nothing_and_says_so(
        self, a_day_without_webhooks
    ):
        held = job_leases.claim_lease(name="sync_provider", seconds=60)
        assert held is not None
        out = io.StringIO()

        call_command("sync_provider", "--since", "2026-01-01", stdout=out)

        assert "another sync_provider run is under way; nothing done" in out.getvalue()
        assert not Charge.objects.filter(pk=a_day_without_webhooks["first"]).exists()

    def test_the_worker_runs_it_once_per_interval(self, a_day_without_webhooks, settings):
        """process_refunds --loop asks between passes; a whole run that finished within
        PROVIDER_SYNC_INTERVAL makes the next one wait."""
        settings.PROVIDER_SYNC_INTERVAL = 86_400  # a day: the whole simulated day
        out = io.StringIO()
        worker = ProcessRefunds(stdout=out)

        worker._sync_if_due()
        later = pay(1_200)
        worker._sync_if_due()

        said = out.getvalue()
        assert said.count("sync_provider: read") == 1  # the second was not due
        assert Charge.objects.filter(pk=a_day_without_webhooks["first"]).exists()
        assert not Charge.objects.filter(pk=later).exists()
        JobLease.objects.filter(pk="sync_provider").update(
            last_finished_at=timezone.now() - timedelta(days=2)  # as a day later
        )
        worker._sync_if_due()
        assert Charge.objects.filter(pk=later).exists()
