"""Four eyes: a refund over its requester's limit waits, reserved, for another person.

Enforced here, whatever calls it (admin, tests, a future API):
- only someone with `ledger_app.approve_refund` decides, and never the requester;
- only a refund still awaiting approval, and not past its expiry, can be approved;
- approving makes it `pending` and it goes to the provider through the one guarded send;
  rejecting (with a note) or expiring cancels it and releases its amount with a
  `refund_released` ledger entry;
- each decision is written on the refund (who, when, why) and told as `refund.updated`,
  in the same transaction, under the same locks as every other move (charge, then refund),
  so two people deciding at once make one decision and at most one send.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.utils import timezone

from ledger_app import errors
from ledger_app.charges.selectors import charges_for_update
from ledger_app.customer_mail import services as customer_mail
from ledger_app.customer_mail.models import MailKind
from ledger_app.events import services as events
from ledger_app.events.models import EventType, WebhookEndpoint
from ledger_app.events.selectors import live_endpoints
from ledger_app.ledger.models import LedgerEntry
from ledger_app.ledger.services import append_entry
from ledger_app.refunds.models import Refund
from ledger_app.refunds.services import actor_label, send_inline
from ledger_app.validation import validate_text

APPROVE_PERMISSION = "ledger_app.approve_refund"
EXPIRY_ACTOR = "system:expiry"
DECIDED_FIELDS = ["status", "decided_by", "decided_at", "decision_note", "updated_at"]


def approve_refund(*, refund_id: str, approver: AbstractUser, note: str = "") -> Refund:
    """Approve a refund awaiting approval; it is then sent (inline mode, within the wait
    budget) like any new refund, and the settlement's ledger entry names the approver."""
    note = validate_text(note, errors.InvalidNote)
    refund = _decide(refund_id, approver, note, approve=True)
    if settings.REFUND_DISPATCH != "inline":
        return refund
    return send_inline(refund, actor=actor_label(approver))


def reject_refund(*, refund_id: str, approver: AbstractUser, note: str) -> Refund:
    """Reject a refund awaiting approval: canceled, its amount released. A note is required."""
    note = validate_text(note, errors.InvalidNote)
    if not note.strip():
        raise errors.NoteRequired("Say why the refund is rejected.")
    return _decide(refund_id, approver, note, approve=False)


def expire_approvals(now: datetime | None = None) -> list[str]:
    """Cancel every refund whose approval time ran out, releasing its amount. Returns
    their ids. Safe to run from any number of processes at once."""
    now = now or timezone.now()
    expired = []
    due = Refund.objects.filter(
        status=Refund.Status.AWAITING_APPROVAL, approval_expires_at__lte=now
    ).values_list("pk", flat=True)
    for refund_id in list(due[:1000]):
        endpoints = live_endpoints()  # read before the locks, as every move does
        with transaction.atomic(durable=True):
            refund = _lock(refund_id)
            if refund.status != Refund.Status.AWAITING_APPROVAL:
                continue
            _cancel(refund, EXPIRY_ACTOR, "not approved in time", now, endpoints)
            expired.append(refund_id)
    return expired


def cancel_refund(*, refund_id: str, actor: AbstractUser | str) -> Refund:
    """Cancel a refund awaiting approval at its requester's word: canceled, its amount
    released, as a rejection does; nobody's approval is needed to take a request back.

    Only its requester may: the same API key (`actor` the key's label, as the API's
    POST /v1/refunds/{id}/cancel passes it) or the same person (`actor` the user), or a
    support lead (a user with the approve permission). Anyone else, and any status but
    awaiting approval, is `refund_not_cancelable`, and nothing changes. The refund's
    `decided_by` and the release's ledger entry name who canceled it; its note says
    whether the requester or a lead did."""
    label = actor_label(actor)
    now = timezone.now()
    endpoints = live_endpoints()  # read before the locks, as every move does
    with transaction.atomic(durable=True):
        refund = _lock(refund_id)
        as_who = _may_cancel(refund, actor, label)
        if as_who is None:
            raise errors.RefundNotCancelable(
                f"Refund {refund.pk} can be canceled only by the API key or person that "
                "asked for it, or by a support lead."
            )
        if refund.status != Refund.Status.AWAITING_APPROVAL:
            raise errors.RefundNotCancelable(
                f"Refund {refund.pk} cannot be canceled because it has a status of "
                f"{refund.status}; only a refund awaiting approval can be."
            )
        _cancel(refund, label, f"canceled by {as_who}", now, endpoints, why="canceled")
    return refund


def _may_cancel(refund: Refund, actor: AbstractUser | str, label: str) -> str | None:
    """Who `actor` is to `refund` when it may cancel it ("its requester", "a support
    lead"), None when it may not. A label (an API key's) is its requester only for a
    refund no person asked for; a person is its requester by their user, not by name."""
    if isinstance(actor, str):
        if refund.created_by_id is None and label and refund.actor == label:
            return "its requester"
        return None
    if refund.created_by_id is not None and refund.created_by_id == actor.pk:
        return "its requester"
    if actor.is_active and actor.has_perm(APPROVE_PERMISSION):
        return "a support lead"
    return None


def _decide(refund_id: str, approver: AbstractUser, note: str, *, approve: bool) -> Refund:
    if not approver.has_perm(APPROVE_PERMISSION):
        raise errors.ApprovalNotPermitted()
    decider = actor_label(approver)
    now = timezone.now()
    endpoints = live_endpoints()  # read before the locks, as every move does
    with transaction.atomic(durable=True):
        refund = _lock(refund_id)
        if refund.status != Refund.Status.AWAITING_APPROVAL:
            by = f" by {refund.decided_by}" if refund.decided_by else ""
            raise errors.RefundNotAwaitingApproval(
                f"Refund {refund.pk} is {refund.status}{by}: it is not awaiting approval."
            )
        if refund.created_by_id == approver.pk or refund.actor == decider:
            raise errors.ApprovalByRequester()
        if approve:  # it may still be rejected
            _ensure_approvable(refund)
        expired = refund.approval_expires_at is not None and refund.approval_expires_at <= now
        if expired:  # too late: canceled now rather than left for the expiry run
            _cancel(refund, EXPIRY_ACTOR, "not approved in time", now, endpoints)
        elif approve:
            _approve(refund, decider, note, now, endpoints)
        else:
            _cancel(refund, decider, note, now, endpoints)
    if expired:
        raise errors.ApprovalExpired(
            f"Refund {refund.pk} was not approved before "
            f"{refund.approval_expires_at:%Y-%m-%d %H:%M} UTC: it is canceled and its "
            "amount released."
        )
    return refund


def _ensure_approvable(refund: Refund) -> None:
    """What stops sending a refund's reserved money, under the charge's lock: an open
    dispute (the dispute takes it too), or the provider's refunds held on the charge (the
    provider may have given it back already)."""
    charge = refund.charge
    if charge.dispute_blocks_refunds:
        raise errors.ChargeDisputed(
            f"Charge {charge.pk} is disputed ({charge.dispute_id}, {charge.dispute_status}): "
            f"refund {refund.pk} cannot be approved while it is open, nor once it is lost; "
            "reject it, or wait."
        )
    if charge.provider_disagreement:
        raise errors.ChargeDisagreesWithProvider(
            f"Charge {charge.pk} disagrees with the provider: refund {refund.pk} cannot be "
            "approved until a lead resolves it; reject it if the provider already gave the "
            "money back."
        )


def _lock(refund_id: str) -> Refund:
    """The charge, then the refund: the lock order of every move."""
    charge_id = Refund.objects.filter(pk=refund_id).values_list("charge_id", flat=True).first()
    if charge_id is None:
        raise errors.ResourceMissing(f"No such refund: '{refund_id}'.")
    charge = charges_for_update().get(pk=charge_id)
    refund = Refund.objects.select_for_update().get(pk=refund_id)
    refund.charge = charge
    return refund


# What a decision moved: the status it was in (the event shows it in the API's terms).
DECIDED_FROM = {"status": Refund.Status.AWAITING_APPROVAL}


def _record(refund: Refund, decider: str, note: str, now: datetime) -> None:
    refund.decided_by, refund.decided_at, refund.decision_note = decider, now, note


def _approve(
    refund: Refund, decider: str, note: str, now: datetime, endpoints: list[WebhookEndpoint]
) -> None:
    _record(refund, decider, note, now)
    refund.status = Refund.Status.PENDING
    refund.save(update_fields=DECIDED_FIELDS)
    events.record_many(
        [(EventType.REFUND_UPDATED, refund, dict(DECIDED_FROM))], endpoints=endpoints
    )
    # Only now is the customer told: nothing was said while it waited (nor on a rejection).
    customer_mail.tell(refund, refund.charge, MailKind.MADE)


def _cancel(
    refund: Refund,
    decider: str,
    note: str,
    now: datetime,
    endpoints: list[WebhookEndpoint],
    *,
    why: str = "",
) -> None:
    """Canceled, and the amount back on the charge with a `refund_released` entry whose
    memo says `why` (expired or rejected, by default from the decider) and `note`."""
    _record(refund, decider, note, now)
    refund.status = Refund.Status.CANCELED
    charge = refund.charge
    charge.amount_refunded -= refund.amount
    refund.save(update_fields=DECIDED_FIELDS)
    charge.save(update_fields=["amount_refunded", "updated_at"])
    append_entry(
        charge=charge,
        refund=refund,
        kind=LedgerEntry.Kind.REFUND_RELEASED,
        amount=refund.amount,
        actor=decider,
        memo=f"{why or ('expired' if decider == EXPIRY_ACTOR else 'rejected')}: {note}",
    )
    events.record_many(
        [(EventType.REFUND_UPDATED, refund, dict(DECIDED_FROM))], endpoints=endpoints
    )
