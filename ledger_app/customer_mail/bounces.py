"""Bounces: a delivery status notification (RFC 3464) that came back for a customer mail,
read for the mail it is about (the Message-ID of the returned message or its headers)
and for why it failed. What the mail server's pipe or a person hands
`record_mail_bounce`: anything at all, so whatever cannot be read is not a bounce."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import Message

log = logging.getLogger("ledger_app.customer_mail")

MAX_REASON_LENGTH = 500
# A Message-ID as ours are written: <...@...>, printable, no spaces, fits the column.
MESSAGE_ID = re.compile(r"<[!-;=?-~]{1,250}@[!-;=?-~]{1,250}>")
CONTROLS = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Bounce:
    message_id: str  # of the mail that came back, <...@...>
    failed: bool  # Action: failed (a delay is not a bounce)
    reason: str  # Status and Diagnostic-Code, as the reporting server said them


def read_bounce(raw: bytes) -> Bounce | None:
    """The bounce in a DSN; None when it is not one (no delivery-status part, no returned
    Message-ID that could be ours, or a message the parser cannot read)."""
    try:
        return _read(raw)
    except Exception as exc:  # hostile or broken input: not a bounce, never a traceback
        log.warning("record_mail_bounce: a report that could not be read (%s)", type(exc).__name__)
        return None


def message_id_of(text: str) -> str | None:
    """`text` as a Message-ID that could be one of ours; None otherwise."""
    text = text.strip()
    return text if MESSAGE_ID.fullmatch(text) and len(text) <= 255 else None


def _read(raw: bytes) -> Bounce | None:
    report = message_from_bytes(raw, policy=policy.default)
    status: list[Message] = []
    returned = ""
    for part in report.walk():
        kind = part.get_content_type()
        if kind == "message/delivery-status":
            status = [p for p in part.get_payload() if isinstance(p, Message)]
        elif kind in ("message/rfc822", "message/global") and not returned:
            inner = part.get_payload()
            first = inner[0] if isinstance(inner, list) and inner else None
            if isinstance(first, Message):
                returned = str(first.get("Message-ID", ""))
        elif kind == "text/rfc822-headers" and not returned:
            payload = part.get_payload(decode=True)
            text = payload if isinstance(payload, bytes) else b""
            headers = message_from_bytes(text, policy=policy.default)
            returned = str(headers.get("Message-ID", ""))
    message_id = message_id_of(returned)
    recipients = status[1:]  # the first block is the reporting server's
    if not recipients or message_id is None:
        return None
    first = recipients[0]
    action = str(first.get("Action", "")).strip().lower()
    said = " ".join(
        str(first.get(name, "")).strip()
        for name in ("Status", "Diagnostic-Code")
        if first.get(name)
    )
    reason = CONTROLS.sub(" ", said).strip()[:MAX_REASON_LENGTH] or CONTROLS.sub(" ", action)[:50]
    return Bounce(message_id, action == "failed", reason)
