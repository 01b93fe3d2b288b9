"""Refund limits and four eyes: over its requester's limit a refund waits, reserved and
unsent, until another person with the approve permission approves it (then it is sent
once) or rejects it (canceled, released); not decided in time, it expires the same way."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone

from ledger_app import errors
from ledger_app.access.api_keys import create_api_key
from ledger_app.approvals.services import approve_refund, expire_approvals, reject_refund
from ledger_app.mirror.events_in import apply_provider_event
from ledger_app.models import Event, LedgerEntry, Refund
from ledger_app.provider.dispatch import process_pending_refunds, reconcile_refunds
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRefund, ProviderRequest
from tests.factories import AGENTS_MIGRATION, LEADS_MIGRATION, ChargeFactory, migration_group
from tests.invariants import assert_provider_agrees, books
from tests.processes import run_command
from tests.services.people import provider_contact, set_limit, staff

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("ledger_invariants", "inline_dispatch"),
]


# --- people and limits (the shared helpers are in tests/services/people.py) --------------


def entries(refund: Refund) -> list[tuple[str, int, str]]:
    return list(
        LedgerEntry.objects.filter(refund=refund)
        .order_by("id")
        .values_list("kind", "amount", "actor")
    )


def midnight_utc() -> datetime:
    return datetime.combine(timezone.now().astimezone(UTC).date(), time(), tzinfo=UTC)


@pytest.fixture
def agents():
    return migration_group(AGENTS_MIGRATION)


@pytest.fixture
def leads():
    return migration_group(LEADS_MIGRATION)


@pytest.fixture
def agent(django_user_model, agents):
    return staff(django_user_model, "agent", agents)


@pytest.fixture
def lead(django_user_model, leads):
    return staff(django_user_model, "lead", leads)


@pytest.fixture
def agent_limited_to_1000(agents):
    """Support agents may refund 10.00 at a time without approval."""
    return set_limit(group=agents, per_refund=1_000)


@pytest.fixture
def awaiting(agent, agent_limited_to_1000):
    """An agent's refund of 50.00 from a 100.00 charge, over their limit of 10.00."""
    charge = ChargeFactory(amount=10_000)
    refund = create_refund(RefundRequest(charge_id=charge.id, amount=5_000, actor=agent)).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    return refund


def assert_waits_reserved_and_unsent(refund: Refund, *, reserved_on_charge: int) -> None:
    refund.refresh_from_db()
    refund.charge.refresh_from_db()
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    assert refund.charge.amount_refunded == reserved_on_charge
    assert entries(refund) == [("refund_reserved", refund.amount, refund.actor)]
    assert provider_contact(refund) == [], "a refund awaiting approval reached the provider"
    assert not ProviderRefund.objects.filter(idempotency_key=refund.provider_idempotency_key)


# --- limits --------------------------------------------------------------------------------


class TestPerRefundLimit:
    def test_exactly_the_limit_goes_straight_to_the_provider(self, agent, agent_limited_to_1000):
        charge = ChargeFactory(amount=5_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item

        assert refund.status == Refund.Status.SUCCEEDED
        assert provider_contact(refund) == ["refund"]
        assert refund.approval_expires_at is None

    def test_one_minor_unit_over_waits_reserved_and_is_not_sent(
        self, agent, agent_limited_to_1000, settings
    ):
        charge = ChargeFactory(amount=5_000)
        requests_before = ProviderRequest.objects.count()
        before = timezone.now()

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_001, actor=agent)).item

        assert refund.status == Refund.Status.AWAITING_APPROVAL
        assert_waits_reserved_and_unsent(refund, reserved_on_charge=1_001)
        assert ProviderRequest.objects.count() == requests_before
        hours = timedelta(hours=settings.APPROVAL_EXPIRY_HOURS)
        assert settings.APPROVAL_EXPIRY_HOURS == 72
        assert refund.approval_expires_at is not None
        assert before + hours <= refund.approval_expires_at <= timezone.now() + hours

    def test_the_wait_lasts_approval_expiry_hours(self, awaiting, agent, settings):
        settings.APPROVAL_EXPIRY_HOURS = 2
        before = timezone.now()

        refund = create_refund(
            RefundRequest(charge_id=awaiting.charge_id, amount=2_000, actor=agent)
        ).item

        expires = refund.approval_expires_at
        assert expires is not None
        assert before + timedelta(hours=2) <= expires <= timezone.now() + timedelta(hours=2)

    def test_what_it_reserves_cannot_be_refunded_again_while_it_waits(self, awaiting):
        before = books(awaiting.charge)

        with pytest.raises(errors.AmountTooLarge):
            create_refund(RefundRequest(charge_id=awaiting.charge_id, amount=5_001))

        assert books(awaiting.charge) == before

    def test_neither_the_worker_nor_the_reconciler_sends_an_awaiting_refund(
        self, awaiting, worker_dispatch
    ):
        Refund.objects.filter(pk=awaiting.pk).update(created_at=timezone.now() - timedelta(days=1))

        process_pending_refunds(lease_seconds=0)
        reconcile_refunds(lease_seconds=0)

        assert_waits_reserved_and_unsent(awaiting, reserved_on_charge=5_000)

    def test_a_provider_event_about_an_awaiting_refund_moves_nothing(self, awaiting):
        before = books(awaiting.charge)

        apply_provider_event(
            {
                "id": "evt_forged_1",
                "type": "refund.updated",
                "data": {
                    "object": {
                        "id": "re_provider_forged",
                        "object": "refund",
                        "status": "succeeded",
                        "metadata": {"ledger_refund_id": awaiting.id},
                    }
                },
            }
        )

        assert books(awaiting.charge) == before
        assert_waits_reserved_and_unsent(awaiting, reserved_on_charge=5_000)


class TestDailyLimit:
    @pytest.fixture
    def day_of_1000(self, agents):
        return set_limit(group=agents, per_day=1_000)

    def test_refunds_adding_up_to_exactly_the_daily_limit_go_through(self, agent, day_of_1000):
        charge = ChargeFactory(amount=5_000)

        first = create_refund(RefundRequest(charge_id=charge.id, amount=400, actor=agent)).item
        second = create_refund(RefundRequest(charge_id=charge.id, amount=600, actor=agent)).item
        third = create_refund(RefundRequest(charge_id=charge.id, amount=1, actor=agent)).item

        assert (first.status, second.status) == ("succeeded", "succeeded")
        assert third.status == Refund.Status.AWAITING_APPROVAL
        assert_waits_reserved_and_unsent(third, reserved_on_charge=1_001)

    def test_one_refund_over_the_whole_day_waits(self, agent, day_of_1000):
        charge = ChargeFactory(amount=5_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_001, actor=agent)).item

        assert_waits_reserved_and_unsent(refund, reserved_on_charge=1_001)

    def test_awaiting_canceled_and_failed_refunds_do_not_count(self, agent, lead, day_of_1000):
        declining = ChargeFactory(amount=5_000, metadata={"simulate_refund": "decline"})
        failed = create_refund(
            RefundRequest(charge_id=declining.id, amount=1_000, actor=agent)
        ).item
        waiting = create_refund(
            RefundRequest(charge_id=declining.id, amount=1_001, actor=agent)
        ).item
        rejected = create_refund(
            RefundRequest(charge_id=declining.id, amount=1_002, actor=agent)
        ).item
        reject_refund(refund_id=rejected.id, approver=lead, note="duplicate")
        charge = ChargeFactory(amount=5_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item

        assert failed.status == "failed"
        assert Refund.objects.get(pk=waiting.pk).status == "awaiting_approval"
        assert Refund.objects.get(pk=rejected.pk).status == "canceled"
        assert refund.status == Refund.Status.SUCCEEDED

    def test_a_refund_a_lead_approved_does_not_count(self, agent, lead, day_of_1000):
        charge = ChargeFactory(amount=5_000)
        approved = create_refund(RefundRequest(charge_id=charge.id, amount=1_001, actor=agent)).item
        approve_refund(refund_id=approved.id, approver=lead)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item

        assert Refund.objects.get(pk=approved.pk).status == "succeeded"
        assert refund.status == Refund.Status.SUCCEEDED  # the day is still the agent's own

    def test_pending_and_unknown_refunds_count(self, agent, day_of_1000, settings):
        slow = ChargeFactory(amount=5_000, metadata={"simulate_refund": "timeout"})
        unknown = create_refund(RefundRequest(charge_id=slow.id, amount=600, actor=agent)).item
        settings.REFUND_DISPATCH = "worker"  # the next one stays pending
        charge = ChargeFactory(amount=5_000)
        pending = create_refund(RefundRequest(charge_id=charge.id, amount=300, actor=agent)).item

        fits = create_refund(RefundRequest(charge_id=charge.id, amount=100, actor=agent)).item
        over = create_refund(RefundRequest(charge_id=charge.id, amount=1, actor=agent)).item

        assert (unknown.status, pending.status) == ("unknown", "pending")
        assert fits.status == Refund.Status.PENDING
        assert over.status == Refund.Status.AWAITING_APPROVAL

    @pytest.mark.parametrize(
        ("created", "status"),
        [
            (timedelta(microseconds=-1), Refund.Status.SUCCEEDED),  # yesterday: not counted
            (timedelta(0), Refund.Status.AWAITING_APPROVAL),  # midnight is today
        ],
        ids=["just-before-midnight", "at-midnight"],
    )
    def test_the_day_starts_at_midnight_utc(self, agent, day_of_1000, created, status):
        charge = ChargeFactory(amount=5_000)
        earlier = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item
        Refund.objects.filter(pk=earlier.pk).update(created_at=midnight_utc() + created)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item

        assert refund.status == status

    def test_other_peoples_and_other_currencies_refunds_do_not_count(
        self, django_user_model, agents, agent, day_of_1000
    ):
        colleague = staff(django_user_model, "colleague", agents)
        euros = ChargeFactory(amount=9_000, currency="eur")
        create_refund(RefundRequest(charge_id=euros.id, amount=5_000, actor=agent))
        charge = ChargeFactory(amount=5_000)
        create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=colleague))
        create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor="cli:ops"))

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_000, actor=agent)).item

        assert refund.status == Refund.Status.SUCCEEDED

    def test_per_refund_and_per_day_apply_together(self, agents, agent):
        set_limit(group=agents, per_refund=500, per_day=800)
        charge = ChargeFactory(amount=5_000)

        results = [
            create_refund(
                RefundRequest(charge_id=charge.id, amount=amount, actor=agent)
            ).item.status
            for amount in (501, 500, 300, 1)
        ]

        assert results == ["awaiting_approval", "succeeded", "succeeded", "awaiting_approval"]


class TestWhoseLimit:
    def test_no_limit_rows_means_refunds_go_straight_through(self, agent):
        charge = ChargeFactory(amount=1_000_000)

        refund = create_refund(
            RefundRequest(charge_id=charge.id, amount=1_000_000, actor=agent)
        ).item

        assert refund.status == Refund.Status.SUCCEEDED

    def test_a_limit_in_another_currency_does_not_apply_when_other_currencies_are_allowed(
        self, agents, agent, settings
    ):
        """The old behaviour, kept behind REFUND_LIMIT_OTHER_CURRENCIES=allow; the default
        (approve) is in test_limits_fail_closed.py."""
        settings.REFUND_LIMIT_OTHER_CURRENCIES = "allow"
        set_limit(group=agents, currency="eur", per_refund=1, per_day=1)
        charge = ChargeFactory(amount=10_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=10_000, actor=agent)).item

        assert refund.status == Refund.Status.SUCCEEDED

    @pytest.mark.parametrize(
        ("group_limit", "own_limit", "amount", "status"),
        [
            (1_000, 5_000, 5_000, "succeeded"),  # own higher: the group's lower one ignored
            (5_000, 1_000, 1_001, "awaiting_approval"),  # own lower: it still wins
            (5_000, None, 9_000, "succeeded"),  # own row blank: unlimited for that kind
        ],
    )
    def test_a_users_own_limit_overrides_their_groups(
        self, agents, agent, group_limit, own_limit, amount, status
    ):
        set_limit(group=agents, per_refund=group_limit)
        set_limit(user=agent, per_refund=own_limit)
        charge = ChargeFactory(amount=10_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=amount, actor=agent)).item

        assert refund.status == status

    def test_a_users_own_limit_in_another_currency_leaves_their_groups_in_this_one(
        self, agents, agent
    ):
        set_limit(group=agents, per_refund=1_000)
        set_limit(user=agent, currency="eur", per_refund=50_000)
        charge = ChargeFactory(amount=10_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=1_001, actor=agent)).item

        assert refund.status == Refund.Status.AWAITING_APPROVAL

    def test_among_several_groups_the_highest_limit_counts(self, agents, leads, agent):
        agent.groups.add(leads)
        set_limit(group=agents, per_refund=100, per_day=5_000)
        set_limit(group=leads, per_refund=300, per_day=400)
        charge = ChargeFactory(amount=10_000)

        statuses = [
            create_refund(
                RefundRequest(charge_id=charge.id, amount=amount, actor=agent)
            ).item.status
            for amount in (300, 301, 300, 300)
        ]

        # 300 fits the leads' per refund; the day is the agents' 5,000 (higher than 400)
        assert statuses == ["succeeded", "awaiting_approval", "succeeded", "succeeded"]

    def test_a_group_leaving_a_kind_blank_makes_that_kind_unlimited(self, agents, leads, agent):
        agent.groups.add(leads)
        set_limit(group=agents, per_refund=100, per_day=200)
        set_limit(group=leads, per_day=150)  # per refund: blank
        charge = ChargeFactory(amount=10_000)

        big = create_refund(RefundRequest(charge_id=charge.id, amount=200, actor=agent)).item
        over_the_day = create_refund(RefundRequest(charge_id=charge.id, amount=1, actor=agent)).item

        assert big.status == Refund.Status.SUCCEEDED
        assert over_the_day.status == Refund.Status.AWAITING_APPROVAL

    @pytest.mark.parametrize("actor", ["cli:ops", "system", None])
    def test_commands_and_the_system_are_not_limited(self, agents, actor):
        set_limit(group=agents, per_refund=1, per_day=1)
        set_limit(api_key=create_api_key(name="limited")[0], per_refund=1, per_day=1)
        charge = ChargeFactory(amount=10_000)

        refund = create_refund(RefundRequest(charge_id=charge.id, amount=10_000, actor=actor)).item

        assert refund.status == Refund.Status.SUCCEEDED

    def test_an_api_keys_limit_applies_to_that_key_only(self):
        limited, _ = create_api_key(name="limited")
        other, _ = create_api_key(name="other")
        set_limit(api_key=limited, per_refund=1_000)
        charge = ChargeFactory(amount=10_000)

        waits = create_refund(
            RefundRequest(charge_id=charge.id, amount=1_001, actor=f"api_key:{limited.prefix}")
        ).item
        goes = create_refund(
            RefundRequest(charge_id=charge.id, amount=1_001, actor=f"api_key:{other.prefix}")
        )

        assert_waits_reserved_and_unsent(waits, reserved_on_charge=2_002)
        assert goes.item.status == Refund.Status.SUCCEEDED


# --- idempotency -------------------------------------------------------------------------------


class TestIdempotency:
    def test_a_replay_returns_the_refund_as_it_stands_now(self, agent, lead, agent_limited_to_1000):
        charge = ChargeFactory(amount=10_000)
        request = dict(charge_id=charge.id, amount=2_000, idempotency_key="k-wait", actor=agent)
        first = create_refund(RefundRequest(**request))
        while_waiting = books(charge)

        waiting = create_refund(RefundRequest(**request))
        assert books(charge) == while_waiting
        approve_refund(refund_id=first.item.id, approver=lead)
        once_approved = books(charge)
        done = create_refund(RefundRequest(**request))

        assert books(charge) == once_approved
        assert (first.replayed, first.item.status) == (False, "awaiting_approval")
        assert (waiting.replayed, waiting.item.id, waiting.item.status) == (
            True,
            first.item.id,
            "awaiting_approval",
        )
        assert (done.replayed, done.item.id, done.item.status) == (True, first.item.id, "succeeded")
        assert provider_contact(first.item) == ["refund"]

    def test_a_replay_of_a_rejected_refund_returns_it_canceled_and_refunds_nothing(
        self, agent, lead, agent_limited_to_1000
    ):
        charge = ChargeFactory(amount=10_000)
        request = dict(charge_id=charge.id, amount=2_000, idempotency_key="k-no", actor=agent)
        refund = create_refund(RefundRequest(**request)).item
        reject_refund(refund_id=refund.id, approver=lead, note="not ours to refund")
        before = books(charge)

        again = create_refund(RefundRequest(**request))

        assert (again.replayed, again.item.id, again.item.status) == (True, refund.id, "canceled")
        assert books(charge) == before
        assert provider_contact(refund) == []


# --- four eyes -----------------------------------------------------------------------------------


def decide(decision: str, refund: Refund, approver, note: str = "checked the order"):
    if decision == "approve":
        return approve_refund(refund_id=refund.id, approver=approver, note=note)
    return reject_refund(refund_id=refund.id, approver=approver, note=note)


def snapshot(refund: Refund) -> tuple:
    """The refund's decision fields and everything it could have written."""
    refund.refresh_from_db()
    return (
        refund.status,
        refund.decided_by,
        refund.decided_at,
        books(refund.charge),
        Event.objects.count(),
        ProviderRequest.objects.count(),
    )


class TestWhoMayDecide:
    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_the_requester_cannot_decide_their_own_even_with_the_permission(
        self, django_user_model, leads, decision
    ):
        requester = staff(django_user_model, "lead-requester", leads)
        set_limit(user=requester, per_refund=1_000)
        charge = ChargeFactory(amount=10_000)
        refund = create_refund(
            RefundRequest(charge_id=charge.id, amount=2_000, actor=requester)
        ).item
        assert requester.has_perm("ledger_app.approve_refund")
        before = snapshot(refund)

        with pytest.raises(errors.ApprovalByRequester) as refused:
            decide(decision, refund, requester)

        assert refused.value.code == "approval_by_requester"
        assert snapshot(refund) == before
        assert_waits_reserved_and_unsent(refund, reserved_on_charge=2_000)

    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_a_superuser_cannot_decide_their_own_either(self, django_user_model, decision):
        boss = django_user_model.objects.create_superuser("boss", email="", password=None)
        set_limit(user=boss, per_refund=1_000)
        charge = ChargeFactory(amount=10_000)
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=2_000, actor=boss)).item
        before = snapshot(refund)

        with pytest.raises(errors.ApprovalByRequester):
            decide(decision, refund, boss)

        assert snapshot(refund) == before

    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_someone_without_the_approve_permission_cannot_decide(
        self, django_user_model, agents, awaiting, decision
    ):
        colleague = staff(django_user_model, "colleague", agents)
        before = snapshot(awaiting)

        with pytest.raises(errors.ApprovalNotPermitted) as refused:
            decide(decision, awaiting, colleague)

        assert refused.value.code == "approval_not_permitted"
        assert snapshot(awaiting) == before

    def test_an_inactive_lead_cannot_decide(self, lead, awaiting):
        lead.is_active = False
        lead.save()
        before = snapshot(awaiting)

        with pytest.raises(errors.ApprovalNotPermitted):
            approve_refund(refund_id=awaiting.id, approver=lead)

        assert snapshot(awaiting) == before

    @pytest.mark.parametrize("first", ["approve", "reject"])
    @pytest.mark.parametrize("second", ["approve", "reject"])
    def test_deciding_twice_is_refused_and_changes_nothing(
        self, django_user_model, leads, lead, awaiting, first, second
    ):
        other_lead = staff(django_user_model, "other-lead", leads)
        decide(first, awaiting, lead)
        before = snapshot(awaiting)

        with pytest.raises(errors.RefundNotAwaitingApproval) as refused:
            decide(second, awaiting, other_lead)

        assert refused.value.code == "refund_not_awaiting_approval"
        assert "user:lead" in refused.value.message  # says who decided
        assert snapshot(awaiting) == before

    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_a_refund_that_never_waited_cannot_be_decided(self, lead, agent, decision):
        charge = ChargeFactory(amount=1_000)
        refund = create_refund(RefundRequest(charge_id=charge.id, amount=100, actor=agent)).item
        before = snapshot(refund)

        with pytest.raises(errors.RefundNotAwaitingApproval):
            decide(decision, refund, lead)

        assert snapshot(refund) == before

    def test_an_unknown_refund_is_resource_missing(self, lead):
        with pytest.raises(errors.ResourceMissing):
            approve_refund(refund_id="re_doesnotexist", approver=lead)


class TestApprove:
    def test_approving_sends_it_once_and_records_the_decision(self, lead, awaiting):
        before = timezone.now()

        refund = approve_refund(refund_id=awaiting.id, approver=lead, note="order checked")

        stored = Refund.objects.get(pk=awaiting.pk)
        assert refund.status == stored.status == Refund.Status.SUCCEEDED
        assert (stored.decided_by, stored.decision_note) == ("user:lead", "order checked")
        assert stored.decided_at is not None
        assert before <= stored.decided_at <= timezone.now()
        assert provider_contact(stored) == ["refund"]
        sent = ProviderRefund.objects.get(idempotency_key=stored.provider_idempotency_key)
        assert (sent.amount, sent.currency) == (5_000, "usd")
        assert entries(stored) == [
            ("refund_reserved", 5_000, "user:agent"),
            ("refund_succeeded", 5_000, "user:lead"),
        ]
        stored.charge.refresh_from_db()
        assert stored.charge.amount_refunded == 5_000
        assert_provider_agrees()

    def test_approving_tells_refund_updated_in_the_decision(self, lead, awaiting):
        approve_refund(refund_id=awaiting.id, approver=lead)

        updates = list(
            Event.objects.filter(refund=awaiting, type="refund.updated").order_by("created_at")
        )
        decision, settlement = updates
        # In the API's terms: pending before and after, processing once approved; only
        # ledger_status and pending_reason (left out while waiting) moved.
        assert decision.previous_attributes == {
            "ledger_status": "awaiting_approval",
            "pending_reason": None,
        }
        assert decision.data_object["status"] == "pending"
        assert decision.data_object["pending_reason"] == "processing"
        assert settlement.data_object["status"] == "succeeded"

    def test_approved_in_worker_mode_it_waits_for_the_worker_then_goes_once(
        self, lead, awaiting, worker_dispatch
    ):
        refund = approve_refund(refund_id=awaiting.id, approver=lead)
        assert refund.status == Refund.Status.PENDING
        assert provider_contact(refund) == []

        process_pending_refunds()
        process_pending_refunds()

        refund.refresh_from_db()
        assert refund.status == Refund.Status.SUCCEEDED
        assert provider_contact(refund) == ["refund"]

    def test_an_approved_refund_the_provider_declines_is_released(self, agent, lead, agents):
        set_limit(group=agents, per_refund=1_000)
        charge = ChargeFactory(amount=10_000, metadata={"simulate_refund": "decline"})
        waiting = create_refund(RefundRequest(charge_id=charge.id, amount=4_000, actor=agent)).item

        refund = approve_refund(refund_id=waiting.id, approver=lead)

        charge.refresh_from_db()
        assert refund.status == Refund.Status.FAILED
        assert charge.amount_refunded == 0
        assert entries(refund)[-1] == ("refund_released", 4_000, "user:lead")
        assert provider_contact(refund) == ["refund"]

    def test_a_note_is_optional_but_must_be_valid_text(self, lead, awaiting):
        before = snapshot(awaiting)

        with pytest.raises(errors.InvalidNote):
            approve_refund(refund_id=awaiting.id, approver=lead, note="x" * 1_001)

        assert snapshot(awaiting) == before


class TestReject:
    def test_rejecting_cancels_it_and_releases_the_amount(self, lead, awaiting):
        charge = awaiting.charge

        refund = reject_refund(refund_id=awaiting.id, approver=lead, note="customer kept it")

        stored = Refund.objects.get(pk=refund.pk)
        charge.refresh_from_db()
        assert stored.status == Refund.Status.CANCELED
        assert (stored.decided_by, stored.decision_note) == ("user:lead", "customer kept it")
        assert stored.decided_at is not None
        assert charge.amount_refunded == 0
        released = LedgerEntry.objects.get(refund=stored, kind="refund_released")
        assert (released.amount, released.refunded_delta, released.actor) == (
            5_000,
            -5_000,
            "user:lead",
        )
        assert released.memo.startswith("rejected:") and "customer kept it" in released.memo
        assert provider_contact(stored) == []
        event = Event.objects.get(refund=stored, type="refund.updated")
        assert event.data_object["status"] == "canceled"
        assert "pending_reason" not in event.data_object
        assert event.data_object["failure_reason"] == "merchant_request"  # as Stripe's
        assert event.previous_attributes == {
            "destination_details": {
                "card": {"reference_status": "pending", "type": "pending"},
                "type": "card",
            },
            "failure_reason": None,
            "ledger_status": "awaiting_approval",
            "status": "pending",
        }

    def test_what_a_rejection_releases_can_be_refunded_again(self, lead, awaiting):
        reject_refund(refund_id=awaiting.id, approver=lead, note="wrong charge")

        refund = create_refund(RefundRequest(charge_id=awaiting.charge_id)).item

        assert (refund.amount, refund.status) == (10_000, "succeeded")

    @pytest.mark.parametrize("note", ["", "   \n"])
    def test_a_note_is_required(self, lead, awaiting, note):
        before = snapshot(awaiting)

        with pytest.raises(errors.NoteRequired) as refused:
            reject_refund(refund_id=awaiting.id, approver=lead, note=note)

        assert refused.value.code == "note_required"
        assert snapshot(awaiting) == before


# --- expiry --------------------------------------------------------------------------------


def expire_now(refund: Refund) -> None:
    """Its approval time ran out a moment ago."""
    Refund.objects.filter(pk=refund.pk).update(approval_expires_at=timezone.now())


def assert_expired(refund: Refund) -> None:
    """Canceled by the expiry, its amount released, never sent."""
    refund.refresh_from_db()
    refund.charge.refresh_from_db()
    assert refund.status == Refund.Status.CANCELED
    assert refund.decided_by == "system:expiry"
    assert refund.decided_at is not None
    released = LedgerEntry.objects.get(refund=refund, kind="refund_released")
    assert (released.amount, released.actor) == (refund.amount, "system:expiry")
    assert released.memo.startswith("expired:")
    assert provider_contact(refund) == []


class TestExpiry:
    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_deciding_after_the_approval_time_cancels_it_instead(self, lead, awaiting, decision):
        expire_now(awaiting)

        with pytest.raises(errors.ApprovalExpired) as refused:
            decide(decision, awaiting, lead)

        assert refused.value.code == "approval_expired"
        assert_expired(awaiting)
        assert awaiting.charge.amount_refunded == 0

    def test_expire_approvals_cancels_the_due_ones_only(self, agent, lead, awaiting):
        due_at = awaiting.approval_expires_at
        later = create_refund(
            RefundRequest(charge_id=awaiting.charge_id, amount=3_000, actor=agent)
        ).item
        Refund.objects.filter(pk=later.pk).update(approval_expires_at=due_at + timedelta(seconds=1))
        rejected = create_refund(
            RefundRequest(charge_id=awaiting.charge_id, amount=1_500, actor=agent)
        ).item
        reject_refund(refund_id=rejected.id, approver=lead, note="no")
        Refund.objects.filter(pk=rejected.pk).update(approval_expires_at=due_at)
        going = create_refund(
            RefundRequest(charge_id=awaiting.charge_id, amount=500, actor=agent)
        ).item

        too_early = expire_approvals(now=due_at - timedelta(microseconds=1))
        expired = expire_approvals(now=due_at)
        again = expire_approvals(now=due_at)

        assert (too_early, expired, again) == ([], [awaiting.id], [])
        assert_expired(awaiting)
        assert Refund.objects.get(pk=later.pk).status == Refund.Status.AWAITING_APPROVAL
        assert Refund.objects.get(pk=rejected.pk).decided_by == "user:lead"
        assert Refund.objects.get(pk=going.pk).status == Refund.Status.SUCCEEDED
        assert awaiting.charge.amount_refunded == 3_000 + 500  # what is still reserved

    def test_expire_approvals_defaults_to_now(self, awaiting):
        assert expire_approvals() == []

        expire_now(awaiting)

        assert expire_approvals() == [awaiting.id]
        assert_expired(awaiting)
        assert awaiting.charge.amount_refunded == 0


@pytest.mark.django_db(transaction=True)
class TestCommandsExpireApprovals:
    """The real processes, against the committed test database."""

    @pytest.mark.parametrize(
        ("command", "line"),
        [
            (["reconcile"], "refund {id} canceled (not approved in time)"),
            (["process_refunds", "--once"], "{id} canceled (not approved in time)"),
        ],
        ids=["reconcile", "process_refunds"],
    )
    def test_each_pass_cancels_what_ran_out(self, awaiting, command, line):
        expire_now(awaiting)
        not_due = create_refund(
            RefundRequest(charge_id=awaiting.charge_id, amount=2_000, actor=awaiting.created_by)
        ).item

        done = run_command(*command)

        assert done.returncode == 0, done.stderr
        assert line.format(id=awaiting.id) in done.stdout
        assert not_due.id not in done.stdout
        if command == ["reconcile"]:
            assert "approvals expired: 1" in done.stdout
        assert_expired(awaiting)
        assert awaiting.charge.amount_refunded == 2_000
        assert Refund.objects.get(pk=not_due.pk).status == Refund.Status.AWAITING_APPROVAL
