"""Record a bounce of a customer mail: a delivery status notification read from standard
input (or --file), as a mail server's pipe hands it over, or one Message-ID named by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger_app.customer_mail.bounces import (
    CONTROLS,
    MAX_REASON_LENGTH,
    message_id_of,
    read_bounce,
)
from ledger_app.customer_mail.services import record_bounce

MAX_REPORT_BYTES = 10 * 1024 * 1024


class Command(BaseCommand):
    help = (
        "Mark the customer mail a bounce is about as bounced, with the reason the reporting "
        "server gave; the refund's page in the admin shows it. Reads a delivery status "
        "notification (RFC 3464) from standard input or --file; or --message-id and "
        "--reason name one by hand. A delay notice changes nothing. Exit 1 when the report "
        "names no mail sent here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", help="The bounce as a file (default: standard input).")
        parser.add_argument("--message-id", help="The Message-ID of the mail that bounced.")
        parser.add_argument("--reason", default="", help="Why, with --message-id.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["message_id"]:
            message_id = message_id_of(options["message_id"])
            if message_id is None:
                raise CommandError("--message-id must be one as the mails carry it: <...@...>")
            reason = CONTROLS.sub(" ", options["reason"])[:MAX_REASON_LENGTH] or "by hand"
        else:
            raw = self._read(options["file"])
            bounce = read_bounce(raw)
            if bounce is None:
                raise CommandError("not a delivery status notification naming a returned mail")
            if not bounce.failed:
                self.stdout.write(
                    f"{bounce.message_id}: not a failure ({bounce.reason}); nothing changed"
                )
                return
            message_id, reason = bounce.message_id, bounce.reason
        mail = record_bounce(message_id=message_id, reason=reason)
        if mail is None:
            raise CommandError(f"no customer mail has Message-ID {message_id}")
        self.stdout.write(
            f"mail {mail.pk} of refund {mail.refund_id} to {mail.to}: bounced ({reason})"
        )

    def _read(self, path: str | None) -> bytes:
        if path:
            with Path(path).open("rb") as source:
                raw = source.read(MAX_REPORT_BYTES + 1)
        else:
            raw = sys.stdin.buffer.read(MAX_REPORT_BYTES + 1)
        if len(raw) > MAX_REPORT_BYTES:
            raise CommandError("the report is larger than 10 MB")
        return raw
