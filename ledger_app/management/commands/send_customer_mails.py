"""The mail sender: sends the customer mails waiting in the outbox over SMTP, each once.

Exit 0 when it ran, whatever the SMTP server answered (a refusal is recorded on the mail,
not the command failing); 1 on bad arguments. With --loop, SIGTERM or SIGINT: the mail in
hand is finished, the rest of its batch handed back, exit 0 (docs/customer-mails.md).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from ledger_app.access.time_zones import shown_time
from ledger_app.customer_mail.checks import links_unusable
from ledger_app.customer_mail.models import CustomerMail
from ledger_app.customer_mail.sending import Attempt, send_due
from ledger_app.management.commands._polling import PollingWorker

MAX_LEASE_SECONDS = 86_400


class Command(PollingWorker):
    noun = "mail"
    plural = "mails"
    left_in_hand = (
        "if it was handed to the SMTP server it is marked unknown once its lease runs out "
        "(never sent twice by itself); otherwise it is sent then"
    )
    batch_default = 20
    poll_default = 2.0
    lease_help = (
        "How long a claim holds (default REFUND_EMAIL_LEASE_SECONDS); at least "
        "5 x EMAIL_TIMEOUT_SECONDS + 1."
    )
    help = (
        "Send the customer mails waiting to be sent (refund made, succeeded, failed, its "
        "trace number) over SMTP with Django's e-mail settings. Each is marked before it is "
        "handed over and its answer recorded after: accepted is sent; refused for now (4xx) "
        "is tried again with backoff until REFUND_EMAIL_RETRY_HOURS, then refused; refused "
        "for good (5xx) is refused; no answer is unknown. A mail whose sender stopped while "
        "the server had it becomes unknown and is not sent again by itself. Any number of "
        "senders may run side by side (SKIP LOCKED on PostgreSQL)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        lease = options["lease_seconds"]
        if lease is not None and not 5 * settings.EMAIL_TIMEOUT + 1 <= lease <= MAX_LEASE_SECONDS:
            raise CommandError(
                "--lease-seconds must be at least 5 x EMAIL_TIMEOUT_SECONDS + 1 "
                f"({5 * settings.EMAIL_TIMEOUT + 1:g}) and at most {MAX_LEASE_SECONDS}"
            )
        if options["poll_seconds"] < 0:
            raise CommandError("--poll-seconds must not be negative")
        why = links_unusable()
        if why is not None:
            raise CommandError(f"{why}: the mails' status page links would not work")
        total = self.run_passes(options, send_due, on_attempt=self._log_attempt)
        self.stdout.write(f"send_customer_mails: {total.summary()}")

    def still_leased(self, pk: str | int) -> bool:
        return CustomerMail.objects.filter(pk=pk, leased_until__isnull=False).exists()

    def _log_attempt(self, attempt: Attempt) -> None:
        mail = attempt.mail
        line = f"mail {mail.pk} {mail.kind} of {mail.refund_id}: {attempt.outcome}"
        if attempt.answer:
            line += f" ({attempt.answer[:200]})"
        if attempt.next_attempt_at is not None:
            line += f"; next at {shown_time(attempt.next_attempt_at)}"
        self.stdout.write(line)
