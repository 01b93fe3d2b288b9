"""Settling: moving a refund or charge to what the provider said, with its ledger entry,
in one transaction. States only move forward; anything else changes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from ledger_app import faults, sql_writes
from ledger_app.charges.models import Charge, MovementStatus, ProviderMovement
from ledger_app.charges.selectors import charge_for_update, charges_for_update
from ledger_app.customer_mail import services as customer_mail
from ledger_app.customer_mail.models import MailKind
from ledger_app.events import services as events
from ledger_app.events.models import EventType, WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import new_entry
from ledger_app.provider.card_references import guarded_reference
from ledger_app.refunds.models import Refund
from ledger_app.refunds.selectors import locked_refund

log = logging.getLogger("ledger_app.dispatch")

PENDING, SUCCEEDED, FAILED, UNKNOWN = (
    MovementStatus.PENDING,
    MovementStatus.SUCCEEDED,
    MovementStatus.FAILED,
    MovementStatus.UNKNOWN,
)
# The only moves a refund or charge may make. Nothing moves backwards or out of a final state.
FORWARD: dict[str, set[str]] = {PENDING: {SUCCEEDED, FAILED, UNKNOWN}, UNKNOWN: {SUCCEEDED, FAILED}}
# A refund the provider accepted may still fail later (a closed or expired card), but
# only on the provider's own later word, never on a guess.
REVERSIBLE: dict[str, set[str]] = {**FORWARD, SUCCEEDED: {FAILED}}


@dataclass(frozen=True)
class Outcome:
    status: str  # succeeded, failed or unknown
    provider_id: str = ""
    detail: str = ""
    reference: str = ""  # a succeeded card refund's ARN, when the provider gave one


def settle_refund(
    *,
    refund_id: str,
    outcome: Outcome,
    actor: str = "",
    reversal: bool = False,
    charge_id: str | None = None,
) -> Refund:
    """succeeded: a `refund_succeeded` entry. failed (the provider said no): the amount goes
    back to the charge's refundable balance with a `refund_released` entry. unknown: the
    amount stays reserved. Each move appends `refund.updated` (and `refund.failed`).
    `reversal`: the provider's own later word (a webhook, a re-check) may also move a
    succeeded refund to failed, which releases its amount the same way. `charge_id`, when
    the caller has the refund already (a refund's charge never changes), saves reading it.
    A succeeded refund also takes the outcome's card reference, if it has none yet
    (`_note_reference`), with or without a move."""
    if charge_id is None:
        charge_id = Refund.objects.values_list("charge_id", flat=True).get(pk=refund_id)
    with transaction.atomic(durable=True):
        endpoints = live_endpoints()  # not the charge's: read before its lock is taken
        charge, refund = refund_for_update(charge_id=charge_id, refund_id=refund_id)
        return settle_locked_refund(
            charge=charge,
            refund=refund,
            outcome=outcome,
            actor=actor,
            reversal=reversal,
            endpoints=endpoints,
        )


def refund_for_update(*, charge_id: str, refund_id: str) -> tuple[Charge, Refund]:
    """A refund and its charge, locked for the rest of the caller's transaction. Lock order
    everywhere: the charge, then its refund."""
    charge = charge_for_update(charge_id)
    if charge is None:
        raise Charge.DoesNotExist(f"no charge {charge_id}")
    return charge, locked_refund(refund_id=refund_id, charge_id=charge_id)


def settle_locked_refund(
    *,
    charge: Charge,
    refund: Refund,
    outcome: Outcome,
    actor: str,
    reversal: bool,
    endpoints: list[WebhookEndpoint],
) -> Refund:
    """settle_refund's move, inside the caller's transaction, on rows it locked with
    `refund_for_update` (the provider's webhooks decide under those locks whether the
    event is about this refund at all, and store the event with its effect)."""
    faults.checkpoint("refund.settle_locked")
    previous = _move(refund, outcome, REVERSIBLE if reversal else FORWARD)
    noted = ["destination_reference"] if _note_reference(refund, outcome) else []
    if previous is None:
        if noted:
            _write_reference(refund, charge, endpoints)
        return refund
    refund.charge = charge
    statements: list[sql_writes.Statement | None] = [
        sql_writes.update(refund, MOVED_FIELDS[Refund] + noted)
    ]
    if outcome.status == SUCCEEDED:
        statements.append(_book(charge, refund, LedgerEntry.Kind.REFUND_SUCCEEDED, actor))
    elif outcome.status == FAILED:
        charge.amount_refunded -= refund.amount
        statements.append(sql_writes.update(charge, ["amount_refunded", "updated_at"]))
        statements.append(
            _book(charge, refund, LedgerEntry.Kind.REFUND_RELEASED, actor, outcome.detail)
        )
    told: list[events.Change] = [(EventType.REFUND_UPDATED, refund, previous)]
    if outcome.status == FAILED:
        told.append((EventType.REFUND_FAILED, refund, previous))
    statements += events.event_writes(told, endpoints=endpoints)
    if outcome.status in TOLD_TO_CUSTOMERS:
        statements.append(
            customer_mail.mail_write(refund, charge, TOLD_TO_CUSTOMERS[outcome.status])
        )
    sql_writes.execute_together(statements)  # one round trip on PostgreSQL
    return refund


# The moves a customer is told of (customer_mail): unknown is the back office's doubt, not news.
TOLD_TO_CUSTOMERS: dict[str, MailKind] = {SUCCEEDED: MailKind.SUCCEEDED, FAILED: MailKind.FAILED}


def _write_reference(refund: Refund, charge: Charge, endpoints: list[WebhookEndpoint]) -> None:
    """The reference alone: not a move, so no ledger entry; refund.updated tells of its
    destination_details, as Stripe's does, and the customer gets it to trace the refund by
    (their success mail went without it)."""
    refund.charge = charge
    given = [(EventType.REFUND_UPDATED, refund, {"destination_reference": ""})]
    sql_writes.execute_together(
        [
            sql_writes.update(refund, ["destination_reference"]),
            *events.event_writes(given, endpoints=endpoints),
            customer_mail.mail_write(refund, charge, MailKind.REFERENCE),
        ]
    )


def _note_reference(refund: Refund, outcome: Outcome) -> bool:
    """Put the provider's card reference (ARN) on the locked refund if it succeeded and has
    none yet: written once, never replaced. The caller writes `destination_reference`
    (without `updated_at`, which says when the refund was last settled: the re-check's
    window counts from it). Whether it was put there."""
    reference = guarded_reference(outcome.reference)
    if not reference or outcome.status != SUCCEEDED or refund.status != SUCCEEDED:
        return False
    if refund.destination_reference:
        if refund.destination_reference != reference:
            log.warning(
                "refund %s: the provider now gives card reference %s; it keeps %s",
                refund.pk,
                reference,
                refund.destination_reference,
            )
        return False
    refund.destination_reference = reference
    return True


def _book(
    charge: Charge, refund: Refund, kind: LedgerEntry.Kind, actor: str, memo: str = ""
) -> sql_writes.Statement | None:
    entry = new_entry(
        charge=charge, refund=refund, kind=kind, amount=refund.amount, memo=memo, actor=actor
    )
    return sql_writes.insert([entry])


def settle_charge(*, charge_id: str, outcome: Outcome, actor: str = "") -> Charge:
    """A success appends `charge_succeeded` and the `charge.succeeded` event; a decline
    `charge.failed`; unknown moves no money and tells no one yet."""
    with transaction.atomic(durable=True):
        charge = charges_for_update().get(pk=charge_id)
        return settle_locked_charge(charge=charge, outcome=outcome, actor=actor)


def settle_locked_charge(*, charge: Charge, outcome: Outcome, actor: str) -> Charge:
    """settle_charge's move, inside the caller's transaction, on the charge it locked
    (`charges_for_update`)."""
    faults.checkpoint("charge.settle_locked")
    previous = _move(charge, outcome, FORWARD)
    if previous is not None:
        statements: list[sql_writes.Statement | None] = [
            sql_writes.update(charge, MOVED_FIELDS[Charge])
        ]
        if outcome.status == SUCCEEDED:
            entry = new_entry(
                charge=charge,
                kind=LedgerEntry.Kind.CHARGE_SUCCEEDED,
                amount=charge.amount,
                actor=actor,
            )
            statements.append(sql_writes.insert([entry]))
        told: dict[str, EventType] = {
            SUCCEEDED: EventType.CHARGE_SUCCEEDED,
            FAILED: EventType.CHARGE_FAILED,
        }
        if outcome.status in told:
            statements += events.event_writes([(told[outcome.status], charge, previous)])
        sql_writes.execute_together(statements)
    return charge


def _move(
    item: ProviderMovement, outcome: Outcome, moves: dict[str, set[str]]
) -> dict[str, str] | None:
    """Put the provider's word on the locked row if `moves` allows it (the caller writes
    MOVED_FIELDS); the fields it moved, as they were (Stripe's previous_attributes), or
    None and nothing changed."""
    if outcome.status == item.status:
        return None
    if outcome.status not in moves.get(item.status, ()):
        log.error(
            "%s %s is %s; provider now says %s; left as it is",
            item._meta.model_name,
            item.pk,
            item.status,
            outcome.status,
        )
        return None
    previous: dict[str, str] = {"status": item.status}
    item.status = outcome.status
    setattr(item, item.provider_id_field, outcome.provider_id or item.provider_id)
    item.status_detail = outcome.detail
    item.leased_until = None
    return previous


# What _move changes, for the caller to write with the rest of its change.
MOVED_FIELDS = {
    model: ["status", model.provider_id_field, "status_detail", "leased_until", "updated_at"]
    for model in (Refund, Charge)
}
