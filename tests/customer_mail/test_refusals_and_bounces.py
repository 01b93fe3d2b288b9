"""Customer mails the SMTP server refuses, for now or for good, and the bounces of mails it
took: each recorded where staff see it, and a report that is not a bounce refused in one
line (PostgreSQL, aiosmtpd on loopback, the sender and record_mail_bounce as processes)."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger_app.customer_mail.models import CustomerMail
from ledger_app.customer_mail.sink import Keeper, Received
from tests.customer_mail.mailbox import many_refunds, send_mails, smtp_server
from tests.processes import ROOT, command_env, run_command

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MADE, SUCCEEDED = "refund_made", "refund_succeeded"


def test_a_mail_refused_for_now_past_the_retry_window_is_refused():
    (only,) = many_refunds(1)
    CustomerMail.objects.update(created_at=timezone.now() - timedelta(hours=49))
    with smtp_server(Keeper(answer=lambda received: "451 4.3.0 later")) as (keeper, port):
        send_mails(port)
    assert keeper.received == []
    assert {(m.status, m.outcome) for m in CustomerMail.objects.all()} == {
        ("refused", "gave up after 1 tries; last: 451 4.3.0 later")
    }


@pytest.mark.parametrize(
    "report",
    [
        b"",
        b"not a mail at all\x00\xff",
        b"Content-Type: multipart/report; boundary=x\r\n\r\n--x\r\n"
        b"Content-Type: text/rfc822-headers; charset=x-nonexistent\r\n\r\n"
        b"Message-ID: <a@b>\r\n--x--",
        b"Content-Type: text/rfc822-headers\r\n\r\nMessage-ID: <a@[\r\n",
        b"Content-Type: message/delivery-status\r\n\r\nAction: failed\r\n",
    ],
    ids=["empty", "binary", "unknown-charset", "broken-message-id", "no-returned-message"],
)
def test_a_report_that_is_not_a_bounce_is_refused_in_one_line(report):
    done = subprocess.run(
        [sys.executable, "manage.py", "record_mail_bounce"],
        input=report,
        capture_output=True,
        cwd=ROOT,
        env=command_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert b"Traceback" not in done.stderr
    assert b"not a delivery status notification" in done.stderr


def test_refusals_are_retried_or_recorded_and_bounces_recorded():
    first, second = many_refunds(2)
    answers = {"c0@example.com": ["451 4.3.0 try again later"], "c1@example.com": []}

    def answer(received: Received) -> str | None:
        to = received.recipients[0]
        if to == "c1@example.com":
            return "550 5.1.1 no such mailbox"
        return answers[to].pop(0) if answers[to] else None

    with smtp_server(Keeper(answer=answer)) as (keeper, port):
        send_mails(port)
        waiting = CustomerMail.objects.get(refund=first, kind=MADE)
        assert waiting.status == CustomerMail.Status.PENDING
        assert waiting.attempts == 1 and waiting.outcome.startswith("451")
        assert waiting.next_attempt_at > timezone.now() + timedelta(seconds=50)
        CustomerMail.objects.filter(pk=waiting.pk).update(next_attempt_at=timezone.now())
        send_mails(port)
    waiting.refresh_from_db()
    assert waiting.status == CustomerMail.Status.SENT and waiting.attempts == 2
    refused = CustomerMail.objects.filter(refund=second)
    assert {(m.status, m.outcome) for m in refused} == {("refused", "550 5.1.1 no such mailbox")}
    assert len(keeper.received) == 2  # the first refund's two mails; the refused ones: none

    delivered = CustomerMail.objects.get(refund=first, kind=SUCCEEDED)
    bounce = dsn(delivered.message_id, "c0@example.com")
    done = run_command("record_mail_bounce", input=bounce)
    assert done.returncode == 0, done.stderr
    delivered.refresh_from_db()
    assert delivered.status == CustomerMail.Status.BOUNCED
    assert delivered.outcome == "bounced: 5.1.1 smtp; 550 5.1.1 mailbox unavailable"
    unknown = run_command("record_mail_bounce", input=dsn("<nobody@example.com>", "x@example.com"))
    assert unknown.returncode == 1 and "no customer mail has Message-ID" in unknown.stderr


def dsn(message_id: str, to: str) -> str:
    """A delivery status notification (RFC 3464) as a receiving server sends one back."""
    return (
        "From: MAILER-DAEMON@mx.example.com\r\n"
        "To: refunds@localhost\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b1"\r\n'
        "\r\n--b1\r\nContent-Type: text/plain\r\n\r\nThe mail could not be delivered.\r\n"
        "\r\n--b1\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.com\r\n\r\n"
        f"Final-Recipient: rfc822; {to}\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        "Diagnostic-Code: smtp; 550 5.1.1 mailbox unavailable\r\n"
        "\r\n--b1\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: {message_id}\r\nTo: {to}\r\nSubject: Your refund\r\n"
        "\r\n--b1--\r\n"
    )
