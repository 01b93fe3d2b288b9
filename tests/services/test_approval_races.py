"""Four eyes and daily limits under real concurrency (PostgreSQL, one connection per thread):
two people deciding at once make one decision and at most one provider refund; one
requester's simultaneous refunds never together slip under what is left of their day."""

from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from ledger_app import errors
from ledger_app.approvals.services import approve_refund, expire_approvals, reject_refund
from ledger_app.models import LedgerEntry, Refund
from ledger_app.provider.dispatch import process_pending_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.concurrency import run_at_once
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, ChargeFactory, migration_group
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.services.people import provider_contact, set_limit, staff

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inline_dispatch"),
]

ROUNDS = 10  # each round is a fresh race; a lost one shows within a few


@pytest.fixture
def agents():
    return migration_group(AGENTS_MIGRATION)


@pytest.fixture
def agent(django_user_model, agents):
    set_limit(group=agents, per_refund=1_000)
    return staff(django_user_model, "race-agent", agents)


@pytest.fixture
def two_leads(django_user_model):
    leads = migration_group(LEADS_MIGRATION)
    return staff(django_user_model, "lead-a", leads), staff(django_user_model, "lead-b", leads)


def awaiting_refund(agent, **charge_fields) -> Refund:
    charge = ChargeFactory(amount=10_000, **charge_fields)
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=4_000, actor=agent)).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    return refund


def approve(refund: Refund, lead):
    return lambda: approve_refund(refund_id=refund.id, approver=lead, note="ok")


def reject(refund: Refund, lead):
    return lambda: reject_refund(refund_id=refund.id, approver=lead, note="no")


def releases(refund: Refund) -> int:
    return LedgerEntry.objects.filter(refund=refund, kind="refund_released").count()


def assert_books_and_provider_agree() -> None:
    assert_ledger_invariants()
    assert_provider_agrees()


class TestTwoDeciders:
    @pytest.mark.parametrize("with_worker", [False, True], ids=["two-leads", "and-a-worker"])
    def test_two_leads_approving_at_once_make_one_approval_and_one_provider_refund(
        self, agent, two_leads, with_worker
    ):
        for _ in range(ROUNDS // 2):
            refund = awaiting_refund(agent)
            calls = [approve(refund, lead) for lead in two_leads]
            if with_worker:  # sends whatever is pending the moment it looks
                calls.append(lambda: process_pending_refunds(lease_seconds=60))

            results = run_at_once(calls)

            approved = [r for r in results[:2] if isinstance(r, Refund)]
            refused = [r for r in results[:2] if isinstance(r, Exception)]
            assert len(approved) == 1, results
            assert [type(e) for e in refused] == [errors.RefundNotAwaitingApproval], refused
            refund.refresh_from_db()
            assert refund.status == Refund.Status.SUCCEEDED
            assert refund.decided_by in ("user:lead-a", "user:lead-b")
            assert provider_contact(refund) == ["refund"], "sent more than once"
        assert ProviderRefund.objects.count() == ROUNDS // 2
        assert ProviderRequest.objects.filter(operation="refund").count() == ROUNDS // 2
        assert_books_and_provider_agree()

    def test_an_approval_and_a_rejection_at_once_make_one_decision(self, agent, two_leads):
        first, second = two_leads
        for _ in range(ROUNDS // 2):
            refund = awaiting_refund(agent)

            results = run_at_once([approve(refund, first), reject(refund, second)])

            winners = [r for r in results if isinstance(r, Refund)]
            refused = [r for r in results if isinstance(r, Exception)]
            assert len(winners) == 1, results
            assert [type(e) for e in refused] == [errors.RefundNotAwaitingApproval], refused
            refund.refresh_from_db()
            refund.charge.refresh_from_db()
            if refund.status == Refund.Status.CANCELED:  # the rejection won
                assert (refund.decided_by, provider_contact(refund)) == ("user:lead-b", [])
                assert refund.charge.amount_refunded == 0 and releases(refund) == 1
            else:
                assert refund.status == Refund.Status.SUCCEEDED
                assert (refund.decided_by, provider_contact(refund)) == ("user:lead-a", ["refund"])
                assert refund.charge.amount_refunded == 4_000 and releases(refund) == 0
        assert_books_and_provider_agree()


class TestApprovalAgainstExpiry:
    def test_an_approval_in_time_racing_an_expiry_run_makes_one_outcome(self, agent, two_leads):
        """The expiry run's clock says the time ran out, the approver's says it has not:
        whichever takes the locks first decides."""
        lead = two_leads[0]
        for _ in range(ROUNDS // 2):
            refund = awaiting_refund(agent)
            expires_at = timezone.now() + timedelta(hours=1)
            Refund.objects.filter(pk=refund.pk).update(approval_expires_at=expires_at)

            approved, expired = run_at_once(
                [approve(refund, lead), partial(expire_approvals, now=expires_at)]
            )

            refund.refresh_from_db()
            refund.charge.refresh_from_db()
            if refund.status == Refund.Status.CANCELED:
                assert isinstance(approved, errors.RefundNotAwaitingApproval), approved
                assert expired == [refund.id]
                assert refund.decided_by == "system:expiry" and provider_contact(refund) == []
                assert refund.charge.amount_refunded == 0 and releases(refund) == 1
            else:
                assert isinstance(approved, Refund) and expired == [], (approved, expired)
                assert refund.status == Refund.Status.SUCCEEDED
                assert provider_contact(refund) == ["refund"]
                assert refund.charge.amount_refunded == 4_000 and releases(refund) == 0
        assert_books_and_provider_agree()

    def test_a_late_approval_racing_an_expiry_run_cancels_it_once(self, agent, two_leads):
        lead = two_leads[0]
        for _ in range(ROUNDS // 2):
            refund = awaiting_refund(agent)
            Refund.objects.filter(pk=refund.pk).update(approval_expires_at=timezone.now())

            approved, expired = run_at_once([approve(refund, lead), expire_approvals])

            assert isinstance(
                approved, errors.ApprovalExpired | errors.RefundNotAwaitingApproval
            ), approved
            assert expired == ([] if isinstance(approved, errors.ApprovalExpired) else [refund.id])
            refund.refresh_from_db()
            refund.charge.refresh_from_db()
            assert (refund.status, refund.decided_by) == ("canceled", "system:expiry")
            assert refund.charge.amount_refunded == 0 and releases(refund) == 1
            assert provider_contact(refund) == []
        assert ProviderRequest.objects.count() == 0
        assert_books_and_provider_agree()

    def test_expiry_runs_in_many_processes_at_once_cancel_each_refund_once(self, agent):
        refunds = [awaiting_refund(agent) for _ in range(4)]
        Refund.objects.update(approval_expires_at=timezone.now())

        results = run_at_once([expire_approvals] * 4)

        assert not [r for r in results if isinstance(r, Exception)], results
        assert sorted(id_ for ids in results for id_ in ids) == sorted(r.id for r in refunds)
        for refund in refunds:
            assert releases(refund) == 1
        assert_books_and_provider_agree()


class TestDailyLimitRace:
    def test_two_requests_at_once_never_both_slip_under_what_is_left_of_the_day(
        self, django_user_model, agents
    ):
        """Daily limit 10.00; two 6.00 refunds on two charges at the same moment: one goes
        through, the other waits. Each round is a new agent with a whole day left."""
        set_limit(group=agents, per_day=1_000)
        for n in range(ROUNDS):
            agent = staff(django_user_model, f"day-agent-{n}", agents)
            first, second = ChargeFactory(amount=1_000), ChargeFactory(amount=1_000)

            results = run_at_once(
                [
                    partial(
                        create_refund, RefundRequest(charge_id=first.id, amount=600, actor=agent)
                    ),
                    partial(
                        create_refund, RefundRequest(charge_id=second.id, amount=600, actor=agent)
                    ),
                ]
            )

            assert not [r for r in results if isinstance(r, Exception)], results
            statuses = sorted(r.item.status for r in results)
            assert statuses == ["awaiting_approval", "succeeded"], f"round {n}: {statuses}"
        assert ProviderRefund.objects.count() == ROUNDS
        assert_books_and_provider_agree()

    def test_eight_requests_at_once_fit_exactly_what_the_day_allows(
        self, django_user_model, agents
    ):
        set_limit(group=agents, per_day=1_000)
        agent = staff(django_user_model, "busy-agent", agents)
        charges = [ChargeFactory(amount=300) for _ in range(8)]

        results = run_at_once(
            [
                partial(create_refund, RefundRequest(charge_id=c.id, amount=300, actor=agent))
                for c in charges
            ]
        )

        assert not [r for r in results if isinstance(r, Exception)], results
        statuses = [r.item.status for r in results]
        assert statuses.count("succeeded") == 3, statuses  # 900 of 1,000; a fourth is over
        assert statuses.count("awaiting_approval") == 5, statuses
        assert_books_and_provider_agree()


def test_a_requester_lock_held_too_long_is_a_retryable_lock_timeout(agent, agents):
    """Another of the requester's refunds holds their lock (a slow one): past the lock
    timeout the next is refused as lock_timeout (409, retry with the key), having written
    nothing, not answered as a database failure."""
    from zlib import crc32

    import psycopg
    from django.db import connection

    from ledger_app.approvals.limits import LOCK_SPACE

    set_limit(group=agents, currency="eur", per_day=50_000)  # a daily limit: the lock is taken
    charge = ChargeFactory(amount=10_000)
    settings_dict = connection.settings_dict
    holder = psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"],
        host=settings_dict["HOST"],
        port=settings_dict["PORT"] or 5432,
    )
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)",
                [LOCK_SPACE, crc32(b"user:race-agent") - 2**31],
            )
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        with pytest.raises(errors.LockTimeout):
            create_refund(RefundRequest(charge_id=charge.id, amount=100, actor=agent))
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert not Refund.objects.filter(charge=charge).exists()
