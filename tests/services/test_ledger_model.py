"""A model of the ledger in plain Python beside the real services: after every step of a
random sequence of charges, refunds, retries, bad requests, dispatches and reconciles,
the database says what the model says and every invariant holds."""

import os

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ledger_app import errors
from ledger_app.models import Charge, Refund
from ledger_app.selectors import find_ledger_drift
from ledger_app.services.charges import record_charge
from ledger_app.services.dispatch import process_pending_refunds, reconcile_refunds
from ledger_app.services.refunds import create_refund
from simulated_provider.models import ProviderRefund
from tests.invariants import assert_provider_agrees

EXAMPLES = int(os.environ.get("LEDGER_MODEL_EXAMPLES", "60"))
BEHAVIOURS = ["succeed", "succeed", "decline", "timeout", "apply_then_timeout"]
ORDER = {"pending": 0, "unknown": 1, "succeeded": 2, "failed": 2}
TABLES = [
    "simulated_provider_providerrequest",
    "simulated_provider_providerrefund",
    "simulated_provider_providercharge",
    "ledger_app_idempotencyrecord",
    "ledger_app_ledgerentry",
    "ledger_app_refund",
    "ledger_app_charge",
]


def wipe() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
        else:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - our own table names


class LedgerModel(RuleBasedStateMachine):
    keys = Bundle("keys")

    def __init__(self):
        super().__init__()
        wipe()
        self.charges: dict[str, dict] = {}  # id -> amount, refunded (live), behaviour
        self.charge_ids: list[str] = []  # creation order: draws must not depend on random ids
        self.refunds: dict[str, dict] = {}  # id -> charge, amount, status
        self.requests: dict[str, tuple] = {}  # key -> (request, refund id)
        self.seen_status: dict[str, str] = {}

    @initialize()
    def first_charge(self):
        self.new_charge(5_000, "succeed")

    @rule(amount=st.integers(1, 10_000), behaviour=st.sampled_from(BEHAVIOURS))
    def new_charge(self, amount, behaviour):
        charge = record_charge(
            amount=amount, currency="usd", metadata={"simulate_refund": behaviour}
        )
        self.charges[charge.id] = {"amount": amount, "refunded": 0, "behaviour": behaviour}
        self.charge_ids.append(charge.id)

    def expected(self, charge_id, amount):
        """The refusal the model predicts, or the amount it predicts is refunded."""
        charge = self.charges[charge_id]
        remaining = charge["amount"] - charge["refunded"]
        if remaining == 0:
            return errors.ChargeAlreadyRefunded
        wanted = remaining if amount is None else amount
        return errors.AmountTooLarge if wanted > remaining else wanted

    @rule(
        target=keys,
        data=st.data(),
        amount=st.one_of(st.none(), st.integers(1, 6_000)),
        keyed=st.booleans(),
        key=st.text(alphabet="abcdef", min_size=1, max_size=6),
    )
    def refund(self, data, amount, keyed, key):
        charge_id = data.draw(st.sampled_from(self.charge_ids))
        key = key if keyed else None
        request = (charge_id, amount)
        if key is not None and key in self.requests:
            sent, refund_id = self.requests[key]
            if sent == request:
                result = create_refund(charge_id=charge_id, amount=amount, idempotency_key=key)
                assert result.replayed and result.id == refund_id
            else:
                with pytest.raises(errors.IdempotencyKeyReused):
                    create_refund(charge_id=charge_id, amount=amount, idempotency_key=key)
            return key
        outcome = self.expected(charge_id, amount)
        if isinstance(outcome, type):
            with pytest.raises(outcome):
                create_refund(charge_id=charge_id, amount=amount, idempotency_key=key)
            return key or "unused"
        refund = create_refund(charge_id=charge_id, amount=amount, idempotency_key=key)
        assert not refund.replayed and refund.amount == outcome and refund.status == "pending"
        self.charges[charge_id]["refunded"] += outcome
        self.refunds[refund.id] = {"charge": charge_id, "amount": outcome, "status": "pending"}
        if key is not None:
            self.requests[key] = (request, refund.id)
        return key or "unused"

    @rule(key=consumes(keys), data=st.data())
    def retry_with_a_used_key_for_another_charge(self, key, data):
        if key not in self.requests or len(self.charges) < 2:
            return
        (charge_id, amount), _ = self.requests[key]
        other = data.draw(st.sampled_from([c for c in self.charge_ids if c != charge_id]))
        with pytest.raises(errors.IdempotencyKeyReused):
            create_refund(charge_id=other, amount=amount, idempotency_key=key)

    @rule(amount=st.sampled_from([0, -1, 1.5, True, "100", 2**63]))
    def bad_amount(self, amount):
        charge_id = self.charge_ids[0]
        with pytest.raises(errors.InvalidAmount):
            create_refund(charge_id=charge_id, amount=amount, idempotency_key="bad-amount")

    def settle_model(self):
        for refund_id, status in Refund.objects.values_list("id", "status"):
            model = self.refunds[refund_id]
            if model["status"] != status:
                behaviour = self.charges[model["charge"]]["behaviour"]
                expected = {
                    "succeed": "succeeded",
                    "decline": "failed",
                    "timeout": "unknown",
                    "apply_then_timeout": "unknown",
                }[behaviour]
                assert status in (expected, "succeeded"), (behaviour, status)
                if status == "failed":
                    self.charges[model["charge"]]["refunded"] -= model["amount"]
                model["status"] = status

    @rule()
    def worker_runs(self):
        process_pending_refunds()
        self.settle_model()

    @rule()
    def reconciler_runs(self):
        reconcile_refunds()
        self.settle_model()
        for model in self.refunds.values():
            behaviour = self.charges[model["charge"]]["behaviour"]
            if behaviour == "apply_then_timeout" and model["status"] == "unknown":
                raise AssertionError("the reconciler left a refund the provider made unknown")

    @invariant()
    def books_agree_with_the_model(self):
        assert [str(d) for d in find_ledger_drift()] == []
        stored = dict(Charge.objects.values_list("id", "amount_refunded"))
        assert stored == {cid: c["refunded"] for cid, c in self.charges.items()}
        assert all(c["refunded"] <= c["amount"] for c in self.charges.values())
        assert ProviderRefund.objects.count() <= len(self.refunds)
        assert_provider_agrees()

    @invariant()
    def states_only_move_forward(self):
        for refund_id, status in Refund.objects.values_list("id", "status"):
            before = self.seen_status.get(refund_id, "pending")
            assert ORDER[status] >= ORDER[before], (refund_id, before, status)
            assert not (before in ("succeeded", "failed") and status != before)
            self.seen_status[refund_id] = status


@pytest.mark.django_db(transaction=True)
def test_the_ledger_behaves_like_its_model(settings_fixture_worker_mode):
    run_state_machine_as_test(
        LedgerModel,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


@pytest.fixture
def settings_fixture_worker_mode(settings):
    settings.REFUND_DISPATCH = "worker"
    settings.REFUND_DISPATCH_LEASE_SECONDS = 0
