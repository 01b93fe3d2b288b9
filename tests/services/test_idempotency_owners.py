"""Idempotency keys belong to their owner (issue 44, finding 10), as Stripe scopes them
to an account: each API key owns its own, and the back office (admin forms, commands,
bulk files) one set, so a file re-run by another operator still replays."""

from functools import partial

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ledger_app import errors
from ledger_app.access.api_keys import PREFIX_LENGTH, create_api_key
from ledger_app.charges.services import create_charge
from ledger_app.idempotency.services import BACK_OFFICE, Created, owner_of
from ledger_app.models import Charge, IdempotencyRecord, Refund
from ledger_app.refunds.bulk import BulkRun, RowOutcome, run_bulk_refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.concurrency import run_at_once
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants

pytestmark = pytest.mark.usefixtures("inline_dispatch")


def key_label(name: str) -> str:
    """A real API key's label, as the API names it: api_key:<prefix>."""
    return f"api_key:{create_api_key(name=name)[1][:PREFIX_LENGTH]}"


class TestOwnerOf:
    def test_an_api_key_owns_its_keys_and_everyone_else_shares_the_back_offices(self):
        assert owner_of("api_key:sk_test_ab12cd34") == "api_key:sk_test_ab12cd34"
        assert {owner_of("user:ana"), owner_of("cli:ben"), owner_of("")} == {BACK_OFFICE}


@pytest.mark.django_db
class TestKeysOfTwoOwners:
    def test_two_api_keys_with_one_key_make_two_refunds(self):
        charge = ChargeFactory(amount=10_000)
        mine, theirs = key_label("mine"), key_label("theirs")

        first = create_refund(
            RefundRequest(charge_id=charge.pk, amount=700, idempotency_key="k", actor=mine)
        )
        second = create_refund(
            RefundRequest(charge_id=charge.pk, amount=700, idempotency_key="k", actor=theirs)
        )

        assert not first.replayed and not second.replayed
        assert first.item.id != second.item.id
        charge.refresh_from_db()
        assert charge.amount_refunded == 1_400
        owners = IdempotencyRecord.objects.filter(key="k").values_list("owner", "refund_id")
        assert set(owners) == {(mine, first.item.id), (theirs, second.item.id)}
        assert_ledger_invariants()

    def test_another_owners_key_with_another_request_is_no_reuse(self):
        charge = ChargeFactory(amount=10_000)
        create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=700, idempotency_key="k", actor=key_label("a")
            )
        )

        other = create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=300, idempotency_key="k", actor=key_label("b")
            )
        )

        assert not other.replayed and other.item.amount == 300

    def test_the_same_owner_replays_and_refuses_a_changed_request(self):
        charge = ChargeFactory(amount=10_000)
        mine = key_label("mine")
        first = create_refund(
            RefundRequest(charge_id=charge.pk, amount=700, idempotency_key="k", actor=mine)
        )

        again = create_refund(
            RefundRequest(charge_id=charge.pk, amount=700, idempotency_key="k", actor=mine)
        )
        with pytest.raises(errors.IdempotencyKeyReused):
            create_refund(
                RefundRequest(charge_id=charge.pk, amount=800, idempotency_key="k", actor=mine)
            )

        assert again.replayed and again.item.id == first.item.id
        assert Refund.objects.count() == 1

    def test_an_api_key_cannot_replay_the_back_offices_key(self):
        charge = ChargeFactory(amount=10_000)
        by_staff = create_refund(
            RefundRequest(charge_id=charge.pk, amount=700, idempotency_key="k", actor="cli:ana")
        )

        by_client = create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=700, idempotency_key="k", actor=key_label("client")
            )
        )

        assert not by_client.replayed and by_client.item.id != by_staff.item.id

    def test_a_command_rerun_by_another_operator_replays(self):
        charge = ChargeFactory(amount=10_000)
        first = create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=700, idempotency_key="ticket-9", actor="cli:ana"
            )
        )

        again = create_refund(
            RefundRequest(
                charge_id=charge.pk, amount=700, idempotency_key="ticket-9", actor="cli:ben"
            )
        )

        assert again.replayed and again.item.id == first.item.id


@pytest.mark.django_db
def test_a_bulk_file_rerun_by_another_operator_replays_every_row(tmp_path):
    charges = [ChargeFactory(amount=1_000) for _ in range(3)]
    path = tmp_path / "rows.csv"
    path.write_text(
        "charge,amount,idempotency_key\n"
        f"{charges[0].pk},100,\n{charges[1].pk},200,\n{charges[2].pk},300,order-3\n",
        encoding="utf-8",
    )

    first = run_bulk_refund(path, BulkRun(batch_id="b-1", actor="cli:ana"))
    again = run_bulk_refund(path, BulkRun(batch_id="b-1", actor="cli:ben"))

    assert first.outcomes[RowOutcome.REFUNDED] == 3
    assert again.outcomes[RowOutcome.REPLAYED] == 3
    assert Refund.objects.count() == 3
    assert set(IdempotencyRecord.objects.values_list("owner", flat=True)) == {BACK_OFFICE}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_many_requests_of_three_owners_with_one_key_make_one_refund_per_owner():
    """Real threads, one connection each: per (owner, key) the unique constraint decides,
    the losers wait and replay the winner's refund; owners never share one."""
    charge = ChargeFactory(amount=100_000)
    owners = [key_label("a"), key_label("b"), "cli:ops"]
    per_owner = 5
    calls = [
        partial(
            create_refund,
            RefundRequest(
                charge_id=charge.pk, amount=1_000, idempotency_key="k-shared", actor=actor
            ),
        )
        for actor in owners
        for _ in range(per_owner)
    ]

    results = run_at_once(calls)

    assert all(isinstance(r, Created) for r in results), results
    by_owner = [results[i * per_owner : (i + 1) * per_owner] for i in range(len(owners))]
    ids = [{r.item.id for r in group} for group in by_owner]
    assert all(len(group_ids) == 1 for group_ids in ids), ids
    assert len(set.union(*ids)) == len(owners)
    assert [sum(not r.replayed for r in group) for group in by_owner] == [1, 1, 1]
    charge.refresh_from_db()
    assert charge.amount_refunded == 1_000 * len(owners)
    assert Refund.objects.count() == len(owners)
    assert IdempotencyRecord.objects.filter(key="k-shared").count() == len(owners)
    assert_ledger_invariants()


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_keys_the_owner_that_can_be_known():
    """0029 backfills: a key bound to what an API key made is that key's; a charge key
    it cannot trace to one is `legacy` (only API keys make charges, so some API key sent
    it); everything else, and any key in the back office's reserved namespaces, the back
    office's."""
    client = key_label("client")
    charge = ChargeFactory(amount=10_000)
    create_refund(
        RefundRequest(charge_id=charge.pk, amount=100, idempotency_key="order-1", actor=client)
    )
    create_refund(
        RefundRequest(charge_id=charge.pk, amount=200, idempotency_key="ticket-1", actor="cli:ana")
    )
    create_refund(
        RefundRequest(charge_id=charge.pk, amount=300, idempotency_key="bulk:b7:1", actor=client)
    )
    create_refund(
        RefundRequest(
            charge_id=charge.pk, amount=400, idempotency_key="by-agent", actor=staff_user()
        )
    )
    create_charge(amount=900, currency="usd", idempotency_key="charge-1", actor=client)
    create_charge(amount=900, currency="usd", idempotency_key="charge-2", actor="cli:ana")
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("ledger_app", "0028_webhookendpoint_api_key")])
        executor.loader.build_graph()
        executor.migrate([("ledger_app", "0029_idempotency_key_owner")])

        owners = dict(IdempotencyRecord.objects.values_list("key", "owner"))
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("ledger_app"))

    assert owners == {
        "order-1": client,
        "ticket-1": BACK_OFFICE,
        "bulk:b7:1": BACK_OFFICE,
        "by-agent": BACK_OFFICE,
        "charge-1": client,
        "charge-2": IdempotencyRecord.LEGACY_CLIENT,
    }


@pytest.mark.django_db
class TestAChargeKeyFromBeforeOwners:
    """A client whose charge timed out before the upgrade retries after it: the legacy
    key replays for whichever API key sends it, and never charges twice."""

    def legacy_charge(self):
        made = create_charge(amount=900, currency="usd", idempotency_key="cart-7", actor="")
        IdempotencyRecord.objects.filter(key="cart-7").update(owner=IdempotencyRecord.LEGACY_CLIENT)
        return made.item

    def test_the_retry_of_an_api_key_replays_it(self):
        charge = self.legacy_charge()

        again = create_charge(
            amount=900, currency="usd", idempotency_key="cart-7", actor=key_label("client")
        )

        assert again.replayed and again.item.pk == charge.pk
        assert Charge.objects.count() == 1
        assert IdempotencyRecord.objects.filter(key="cart-7").count() == 1

    def test_another_request_under_it_is_refused(self):
        self.legacy_charge()

        with pytest.raises(errors.IdempotencyKeyReused):
            create_charge(
                amount=901, currency="usd", idempotency_key="cart-7", actor=key_label("client")
            )
        assert Charge.objects.count() == 1

    def test_the_back_offices_own_key_is_not_a_legacy_one(self):
        charge = self.legacy_charge()

        made = create_charge(amount=900, currency="usd", idempotency_key="cart-7", actor="")

        assert not made.replayed and made.item.pk != charge.pk


def staff_user():
    return get_user_model().objects.create_user("agent-m", is_staff=True)
