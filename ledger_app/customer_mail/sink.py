"""An SMTP server on loopback that keeps what it is handed: the demo's (`make run` starts
`mail_sink`, so the demo's customer mails can be read) and the tests'. aiosmtpd speaks
SMTP; this only decides what becomes of a mail: kept as a file, and, for the tests, held
or refused on request."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller


@dataclass
class Received:
    envelope_from: str
    recipients: list[str]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class Keeper:
    """aiosmtpd's handler: each mail accepted is kept (in `received`, and as a .eml file
    in `directory` when one is given), unless `answer` says otherwise: it is called with
    the mail first and may return an SMTP reply to give instead ("450 ...", "550 ...")."""

    directory: Path | None = None
    answer: Callable[[Received], str | None] = lambda received: None
    on_kept: Callable[[Received], None] = lambda received: None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        got = Received(
            envelope_from=str(envelope.mail_from),
            recipients=[str(r) for r in envelope.rcpt_tos],
            data=bytes(envelope.original_content or envelope.content),
        )
        reply = self.answer(got)
        if reply is not None:
            return reply
        with self.lock:
            self.received.append(got)
            number = len(self.received)
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / f"{number:05d}.eml").write_bytes(got.data)
        self.on_kept(got)
        return "250 Message accepted"


def start_sink(keeper: Keeper, *, port: int, host: str = "127.0.0.1") -> Controller:
    """An SMTP server on `host`:`port` in a thread of its own, handing mails to `keeper`;
    `controller.stop()` ends it."""
    controller = Controller(keeper, hostname=host, port=port)
    controller.start()
    return controller
