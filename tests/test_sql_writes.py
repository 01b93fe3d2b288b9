"""The raw writes every refund's reserve and settle make (ledger_app/sql_writes.py)
have the ORM's effect: the same rows as save() and bulk_create write, the instances left
as the ORM leaves them, and nothing that save() would have run skipped (no signal
receivers, no save() of the models' own but the ledger's append-only guard)."""

from typing import TypeVar

import pytest
from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_save, pre_save

from ledger_app import sql_writes
from ledger_app.events import services as events
from ledger_app.events.endpoints import new_secret
from ledger_app.events.models import Event, EventType, WebhookDelivery, WebhookEndpoint
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import new_entry
from ledger_app.models import Charge, Refund
from ledger_app.refunds.models import new_refund_id
from tests.factories import ChargeFactory

M = TypeVar("M", bound=models.Model)
Reserved = Refund | Charge | LedgerEntry  # the rows of a reserve: the refund, the charge, the entry

pytestmark = pytest.mark.django_db

WRITTEN = [Refund, Charge, LedgerEntry, Event, WebhookDelivery]
AUTO_IDS = {LedgerEntry, WebhookDelivery}
# What differs between two changes made one after the other: ids and moments.
OWN = {"id", "charge_id", "refund_id", "event_id", "created_at", "updated_at", "next_attempt_at"}
OWN |= {"provider_idempotency_key", "payment_intent"}


def stored(obj: M) -> M:
    """The row written for `obj`. sql_writes does not read an auto id back (nothing reads
    it after the change): the ledger entry and the delivery are found by what they hold."""
    rows = type(obj)._default_manager
    if isinstance(obj, LedgerEntry) and obj.pk is None:
        return rows.get(refund_id=obj.refund_id)
    if isinstance(obj, WebhookDelivery) and obj.pk is None:
        return rows.get(event_id=obj.event_id)
    return rows.get(pk=obj.pk)


def fields_of(obj) -> dict:
    return {
        f.attname: getattr(obj, f.attname)
        for f in type(obj)._meta.concrete_fields
        if f.attname not in OWN
    }


def reserve(charge_id: str, way: str) -> tuple[Reserved, Reserved, Reserved]:
    """A reserve's rows (the refund, the charge's balance, the entry), written one way."""
    with transaction.atomic():
        charge = Charge.objects.select_for_update().get(pk=charge_id)
        refund_id = new_refund_id()
        refund = Refund(
            id=refund_id,
            charge=charge,
            amount=250,
            currency=charge.currency,
            reason=Refund.Reason.DUPLICATE,
            metadata={"order": "42", "note": "ünïcode"},
            note="two lines\nof note",
            source=Refund.Source.CLI,
            actor="cli:ops",
            provider_idempotency_key=f"refund:{refund_id}",
        )
        charge.amount_refunded += refund.amount
        entry = new_entry(
            charge=charge, refund=refund, kind=LedgerEntry.Kind.REFUND_RESERVED, amount=250
        )
        if way == "sql_writes":
            sql_writes.execute_together(
                [
                    sql_writes.insert([refund]),
                    sql_writes.update(charge, ["amount_refunded", "updated_at"]),
                    sql_writes.insert([entry]),
                ]
            )
        else:
            refund.save(force_insert=True)
            charge.save(update_fields=["amount_refunded", "updated_at"])
            entry.save()
    return refund, charge, entry


def test_a_reserve_written_raw_is_the_orms_row_for_row():
    charges = {way: ChargeFactory(description="Order 42") for way in ("sql_writes", "orm")}
    before = {way: Charge.objects.get(pk=c.pk) for way, c in charges.items()}

    made = {way: reserve(charge.pk, way) for way, charge in charges.items()}

    for raw, orm in zip(made["sql_writes"], made["orm"], strict=True):
        rows = [stored(raw), stored(orm)]
        assert fields_of(rows[0]) == fields_of(rows[1])
        assert raw.pk == rows[0].pk or (raw.pk is None and type(raw) in AUTO_IDS)
        for obj, row in zip((raw, orm), rows, strict=True):
            assert obj._state.adding is False and obj._state.db == "default"
            assert fields_of(obj) == fields_of(row)
            assert obj.created_at == row.created_at
    for way, charge in charges.items():
        after = Charge.objects.get(pk=charge.pk)
        assert after.amount_refunded == before[way].amount_refunded + 250
        assert after.updated_at > before[way].updated_at
        written = made[way][1]
        assert isinstance(written, Charge) and after.updated_at == written.updated_at


def test_events_and_deliveries_written_raw_are_what_bulk_create_writes():
    charge = ChargeFactory()
    WebhookEndpoint(
        url="https://hooks.example.com/a", enabled_events=["*"], secret=new_secret()
    ).save(force_insert=True)
    written: dict[str, list[models.Model]] = {}

    for way in ("sql_writes", "orm"):
        with transaction.atomic():
            change = (EventType.CHARGE_UPDATED, charge, {"description": "before"})
            rows, deliveries = events.build_many([change])
            if way == "sql_writes":
                sql_writes.execute_together(
                    [sql_writes.insert(rows), sql_writes.insert(deliveries)]
                )
            else:
                Event.objects.bulk_create(rows)
                WebhookDelivery.objects.bulk_create(deliveries)
        written[way] = [*rows, *deliveries]

    assert [type(obj) for obj in written["orm"]] == [Event, WebhookDelivery]
    for raw, orm in zip(written["sql_writes"], written["orm"], strict=True):
        found = [stored(raw), stored(orm)]
        assert fields_of(found[0]) == fields_of(found[1])
        assert raw.pk == found[0].pk or (raw.pk is None and type(raw) in AUTO_IDS)
        for obj, row in zip((raw, orm), found, strict=True):
            assert obj._state.adding is False
            assert fields_of(obj) == fields_of(row)


@pytest.mark.django_db(transaction=True)
def test_they_run_only_inside_the_changes_transaction():
    charge = ChargeFactory()

    with pytest.raises(RuntimeError, match="inside the change's transaction"):
        sql_writes.execute_together([sql_writes.update(charge, ["updated_at"])])


@pytest.mark.parametrize("model", WRITTEN, ids=lambda m: m.__name__)
def test_no_signal_receiver_would_be_skipped(model):
    """A receiver of these models' saves would not hear the reserve's and the settle's
    writes: connect one and this fails; write that model through the ORM then."""
    for signal in (pre_save, post_save):
        assert not signal.has_listeners(model), (signal, model)
    assert not m2m_changed.receivers


def test_no_save_of_their_own_is_skipped_but_the_ledgers_guard():
    """LedgerEntry.save refuses to rewrite an entry: sql_writes only inserts entries (and
    PostgreSQL's trigger refuses an UPDATE of one whatever writes it)."""
    own_save = {m.__name__ for m in WRITTEN if m.save is not models.Model.save}

    assert own_save == {"LedgerEntry"}
