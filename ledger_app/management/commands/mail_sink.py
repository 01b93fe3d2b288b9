"""A local SMTP server that keeps every mail as a file: the demo's (`make run` starts it,
and its customer mails land there). Never a real mail server: it delivers nothing."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from ledger_app.customer_mail.sink import Keeper, Received, start_sink


class Command(BaseCommand):
    help = (
        "Listen for SMTP on 127.0.0.1 and keep each mail handed over as a .eml file in "
        "--dir, saying one line for each; nothing is delivered anywhere. For the demo (make "
        "run points EMAIL_HOST and EMAIL_PORT here) and for trying templates."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8025, help="Port (default 8025).")
        parser.add_argument(
            "--dir",
            default=str(Path(settings.BASE_DIR) / "demo-mail"),
            help="Where the mails are kept (default demo-mail/ in the checkout).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's per-connection lines
        directory = Path(options["dir"])
        keeper = Keeper(directory=directory, on_kept=self._said)
        controller = start_sink(keeper, port=options["port"])
        self.stdout.write(f"mail_sink: 127.0.0.1:{options['port']}, keeping mails in {directory}/")
        stop = threading.Event()
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda *_: stop.set())
        stop.wait()
        controller.stop()

    def _said(self, received: Received) -> None:
        message = received.message
        self.stdout.write(f"mail_sink: to {', '.join(received.recipients)}: {message['Subject']}")
        self.stdout.flush()
