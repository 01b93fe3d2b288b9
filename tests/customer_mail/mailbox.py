"""What the customer mail tests share: a real SMTP server on loopback (the project's own
sink, aiosmtpd underneath) and the sender run as a real process against it."""

from __future__ import annotations

import re
import smtplib
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.mail.backends.base import BaseEmailBackend

from ledger_app.customer_mail.models import CustomerMail
from ledger_app.customer_mail.sink import Keeper, Received, start_sink
from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.factories import ChargeFactory
from tests.processes import free_loopback_port, run_command

STATUS_LINK = re.compile(r"https://refunds\.example\.test(/refund-status/\S+)")


@contextmanager
def smtp_server(keeper: Keeper | None = None) -> Iterator[tuple[Keeper, int]]:
    keeper = keeper or Keeper()
    port = free_loopback_port()
    controller = start_sink(keeper, port=port)
    try:
        yield keeper, port
    finally:
        controller.stop()


def sender_env(port: int) -> dict[str, str]:
    return {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(port), "EMAIL_TIMEOUT_SECONDS": "5"}


def send_mails(port: int, *args: str) -> subprocess.CompletedProcess:
    """send_customer_mails --once as an operator runs it, against the test's SMTP server."""
    done = run_command("send_customer_mails", "--once", *args, env=sender_env(port))
    assert done.returncode == 0, done.stderr
    return done


def by_message_id(keeper: Keeper) -> dict[str, list[Received]]:
    """What the server took, by Message-ID (a mail sent twice shows twice)."""
    found: dict[str, list[Received]] = {}
    for received in keeper.received:
        found.setdefault(str(received.message["Message-ID"]), []).append(received)
    return found


def text_of(received: Received) -> str:
    body = received.message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def html_of(received: Received) -> str:
    body = received.message.get_body(("html",))
    assert body is not None
    return str(body.get_content())


def status_path(received: Received) -> str:
    """The status page link of a mail, as a path on the test server."""
    found = STATUS_LINK.search(text_of(received))
    assert found, text_of(received)
    return found.group(1)


def mails_of(refund_id: str) -> list[tuple[str, str]]:
    return list(
        CustomerMail.objects.filter(refund_id=refund_id)
        .order_by("id")
        .values_list("kind", "status")
    )


class DroppedAfterData(BaseEmailBackend):
    """An e-mail backend whose server drops the connection once a mail is handed over,
    before it answers: whether it took the mail cannot be known."""

    def send_messages(self, email_messages):
        for message in email_messages:
            message.message()  # drawn as the SMTP backend draws it (the envelope included)
        raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")


class RefusedForNow(BaseEmailBackend):
    """An e-mail backend whose server refuses every recipient for now (451)."""

    def send_messages(self, email_messages):
        refused = {to: (451, b"4.3.0 later") for m in email_messages for to in m.to}
        raise smtplib.SMTPRecipientsRefused(refused)


def many_refunds(count: int) -> list[Refund]:
    """`count` refunds of $7.00, each of its own charge with an address (c0@example.com...)."""
    made = []
    for number in range(count):
        charge = ChargeFactory(amount=2_000, receipt_email=f"c{number}@example.com")
        made.append(create_refund(RefundRequest(charge_id=charge.id, amount=700)).item)
    return made
