"""Sending customer mails over SMTP (Django's e-mail backend and settings), each once.

A sender claims a batch of due mails with a lease (SKIP LOCKED on PostgreSQL) and sends
them one at a time, each on a connection of its own:

1. the connection is opened; if it cannot be, nothing was handed over and the mail is
   tried again after a backoff;
2. the mail is marked `sending` (committed) before it is handed over;
3. the SMTP server's answer is recorded: accepted (`sent`); refused for now (4xx: tried
   again after a backoff, until REFUND_EMAIL_RETRY_HOURS have passed, then `refused`);
   refused for good (5xx: `refused`); or no answer (a dropped connection, a timeout:
   `unknown`, since the server may have taken it).

Marking it `sending` gives the mail a lease of its own (REFUND_EMAIL_LEASE_SECONDS, more
than one whole handing over takes), so a live sender's mail is never taken for a stopped
one's. A mail found `sending` with its lease run out had a sender that stopped between
handing it over and recording the answer: it may have gone, so it becomes `unknown` and
is never sent again by itself (staff see it on the refund's page and may resend it).
That is the one residual risk, and what bounds it: at most one mail per sender stop, the
one in hand, may be missing, shown as such, and no mail is ever sent twice without a
person asking (docs/customer-mails.md).
"""

from __future__ import annotations

import logging
import random
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import get_connection
from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from ledger_app import faults
from ledger_app.customer_mail.messages import build_message
from ledger_app.customer_mail.models import CustomerMail, MailStatus
from ledger_app.refunds.models import Refund
from ledger_app.worker_parts import ItemInHand, RunOutcomes

log = logging.getLogger("ledger_app.customer_mail")

MAX_OUTCOME_LENGTH = 500
# The first retry after a refusal for now, doubling, up to the most (with some jitter).
BACKOFF_FIRST_SECONDS = 60.0
BACKOFF_MOST_SECONDS = 3600.0
STRANDED = (
    "the sender stopped while the SMTP server had it: it may have gone, so it is not sent "
    "again by itself"
)


@dataclass(frozen=True)
class Attempt:
    """One mail tried: `sent`, `retrying` (due again at next_attempt_at), `refused`,
    `unknown` (no answer), or `superseded` (its lease was lost; nothing recorded)."""

    mail: CustomerMail
    outcome: str
    answer: str
    next_attempt_at: datetime | None = None


def backoff(attempts: int) -> timedelta:
    delay = min(BACKOFF_FIRST_SECONDS * 2 ** min(attempts - 1, 30), BACKOFF_MOST_SECONDS)
    return timedelta(seconds=delay * random.uniform(0.9, 1.1))  # noqa: S311 - jitter


def send_due(
    *,
    batch_size: int = 20,
    lease_seconds: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_attempt: Callable[[Attempt], None] = lambda attempt: None,
    hand: ItemInHand | None = None,
) -> RunOutcomes:
    """Send every mail due when the run starts, a claimed batch at a time; first, mark
    the stranded ones `unknown` (`mark_stranded`). Once `should_stop()`, the mail in hand is
    finished and the rest of its batch handed back."""
    tally = RunOutcomes()
    stranded = mark_stranded()
    if stranded:
        tally.statuses[MailStatus.UNKNOWN] += stranded
    hand = hand or ItemInHand()
    lease_seconds = lease_seconds or settings.REFUND_EMAIL_LEASE_SECONDS
    due_at = timezone.now()
    while not should_stop():
        lease, batch = claim(due_at=due_at, size=batch_size, lease_seconds=lease_seconds)
        if not batch:
            break
        unsent = list(batch)
        try:
            while unsent and not should_stop():
                mail = unsent.pop(0)
                with hand.holding(mail.pk):
                    attempt = send_one(mail, lease, lease_seconds)
                tally.add(attempt.outcome)
                on_attempt(attempt)
        finally:
            tally.handed_back += _hand_back(unsent, lease)
    return tally


def mark_stranded() -> int:
    """Mails whose sender stopped between handing them to the SMTP server and recording
    its answer (`sending`, their lease run out) become `unknown`: how many."""
    return CustomerMail.objects.filter(
        status=MailStatus.SENDING, leased_until__lt=timezone.now()
    ).update(status=MailStatus.UNKNOWN, leased_until=None, outcome=STRANDED)


def claim(
    *, due_at: datetime, size: int, lease_seconds: int
) -> tuple[datetime, list[CustomerMail]]:
    """Lease up to `size` due mails, oldest due first, in one short transaction; mails
    another sender is claiming are skipped, not waited for."""
    now = timezone.now()
    lease = now + timedelta(seconds=lease_seconds)
    due = Q(status=MailStatus.PENDING, next_attempt_at__lte=min(now, due_at)) & (
        Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    )
    with transaction.atomic(durable=True):
        ids = list(
            CustomerMail.objects.filter(due)
            .select_for_update(skip_locked=True)
            .order_by("next_attempt_at", "id")
            .values_list("pk", flat=True)[:size]
        )
        CustomerMail.objects.filter(pk__in=ids).update(leased_until=lease)
    batch = CustomerMail.objects.filter(pk__in=ids).select_related("refund")
    return lease, list(batch.order_by("next_attempt_at", "id"))


def _hand_back(unsent: list[CustomerMail], lease: datetime) -> int:
    """Claimed, not started: free again at once (unless another sender has them by now)."""
    if not unsent:
        return 0
    return CustomerMail.objects.filter(
        pk__in=[m.pk for m in unsent], status=MailStatus.PENDING, leased_until=lease
    ).update(leased_until=None)


def send_one(mail: CustomerMail, lease: datetime, lease_seconds: int) -> Attempt:
    """Open a connection, mark the mail `sending` under a lease of its own, hand it over,
    record the answer. A mail that cannot be drawn (a template a deployment broke, an
    address the SMTP library cannot encode) is refused, never handed over, and the others
    go on."""
    try:
        message = build_message(mail)
    except Exception as exc:
        log.exception("customer mail %s could not be drawn", mail.pk)
        return _record(
            mail, lease, MailStatus.REFUSED, f"not sent: could not be drawn ({_said(exc)})"
        )
    connection = get_connection(fail_silently=False)
    try:
        connection.open()
    except (smtplib.SMTPException, OSError) as exc:  # nothing was handed over
        return _record(mail, lease, MailStatus.PENDING, f"no connection: {_said(exc)}", retry=True)
    try:
        drawn_for = mail.to
        held = _mark_sending(mail, lease, lease_seconds)
        if held is None:
            return Attempt(mail, "superseded", "")
        if mail.to != drawn_for:  # staff changed its address while it waited: drawn again
            try:
                message = build_message(mail)
            except Exception as exc:
                log.exception("customer mail %s could not be drawn", mail.pk)
                said = f"not sent: could not be drawn ({_said(exc)})"
                return _record(mail, held, MailStatus.REFUSED, said, was=MailStatus.SENDING)
        faults.checkpoint("mail.sending")  # marked, not yet handed over
        status, answer, retry = _hand_over(connection, message)
        faults.checkpoint("mail.answered")  # the server answered; not yet recorded
        return _record(mail, held, status, answer, retry=retry, was=MailStatus.SENDING)
    finally:
        try:
            connection.close()
        except (smtplib.SMTPException, OSError):
            log.debug("closing the SMTP connection failed", exc_info=True)


def _mark_sending(mail: CustomerMail, lease: datetime, lease_seconds: int) -> datetime | None:
    """Mark the mail `sending` under a fresh lease of its own (the batch's claim may be
    nearly spent), in one committed UPDATE that applies only while this sender still holds
    it, its claim has not run out, and its address is the one it was drawn for. The new
    lease; None when the mail is no longer this sender's. A mail whose address staff
    changed meanwhile is read again (`mail.to`) and marked for the new address."""
    for _ in range(3):
        now = timezone.now()
        held = now + timedelta(seconds=lease_seconds)
        mine = CustomerMail.objects.filter(
            pk=mail.pk, status=MailStatus.PENDING, leased_until=lease, leased_until__gt=now
        )
        if mine.filter(to=mail.to).update(
            status=MailStatus.SENDING,
            sending_since=now,
            attempts=F("attempts") + 1,
            leased_until=held,
        ):
            return held
        to = mine.values_list("to", flat=True).first()
        if to is None:
            return None
        mail.to = to
    return None


def _hand_over(connection: Any, message: Any) -> tuple[str, str, bool]:
    """(status, what the server said, whether to try again) for one message."""
    try:
        connection.send_messages([message])
    except smtplib.SMTPRecipientsRefused as exc:
        code, said = next(iter(exc.recipients.values()), (550, b"refused"))
        return _refusal(code, said)
    except smtplib.SMTPSenderRefused as exc:
        # The server refuses us, not the customer (REFUND_EMAIL_FROM, the login, TLS): for
        # an operator to put right, so tried again with backoff rather than refused for good.
        answer, _ = _said_by_server(exc.smtp_code, exc.smtp_error)
        return MailStatus.PENDING, f"{answer} (the server refused the sender)", True
    except smtplib.SMTPResponseException as exc:
        return _refusal(exc.smtp_code, exc.smtp_error)
    except (smtplib.SMTPException, OSError) as exc:  # no answer: it may have been taken
        return MailStatus.UNKNOWN, f"no answer: {_said(exc)}", False
    except Exception as exc:  # raised while Django drew the envelope, before any byte went
        log.exception("customer mail could not be handed over")
        return MailStatus.REFUSED, f"not sent: {_said(exc)}", False
    return MailStatus.SENT, f"accepted by {settings.EMAIL_HOST}:{settings.EMAIL_PORT}", False


def _said_by_server(code: int, said: bytes | str) -> tuple[str, bool]:
    """What the server answered, as text; and whether it was "for now" (4xx)."""
    text = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    return f"{code} {text}".strip(), 400 <= code < 500


def _refusal(code: int, said: bytes | str) -> tuple[str, str, bool]:
    answer, for_now = _said_by_server(code, said)
    if for_now:
        return MailStatus.PENDING, answer, True
    return MailStatus.REFUSED, answer, False


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_OUTCOME_LENGTH]


def _record(
    mail: CustomerMail,
    lease: datetime,
    status: str,
    answer: str,
    *,
    retry: bool = False,
    was: str = MailStatus.PENDING,
) -> Attempt:
    """The outcome, in one UPDATE that applies only while this sender still holds the mail."""
    now = timezone.now()
    fields: dict[str, Any] = {"leased_until": None, "outcome": answer[:MAX_OUTCOME_LENGTH]}
    # Tried again later: to the refund's address as it is then (staff may have changed it
    # while this one was being handed over).
    current = Refund.objects.filter(pk=OuterRef("refund_id")).values("customer_email")[:1]
    next_at = None
    outcome = status
    if retry:
        attempts = mail.attempts + 1
        if now - mail.created_at >= timedelta(hours=settings.REFUND_EMAIL_RETRY_HOURS):
            outcome = status = MailStatus.REFUSED
            fields["outcome"] = f"gave up after {attempts} tries; last: {answer}"[
                :MAX_OUTCOME_LENGTH
            ]
        else:
            outcome, next_at = "retrying", now + backoff(attempts)
            status = MailStatus.PENDING
            fields["next_attempt_at"] = next_at
            fields["to"] = Subquery(current)
        if was == MailStatus.PENDING:  # not marked sending: count the try here
            fields["attempts"] = F("attempts") + 1
    fields["status"] = status
    if status == MailStatus.SENT:
        fields["sent_at"] = now
    mine = CustomerMail.objects.filter(pk=mail.pk, status=was, leased_until=lease)
    if not mine.update(**fields):
        outcome = "superseded"
    return Attempt(mail, str(outcome), answer, next_at)
