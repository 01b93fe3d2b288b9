"""Bounces: a delivery status notification (RFC 3464) that came back for a customer mail,
read for the mail it is about (the Message-ID of the returned message or its headers)
and for why it failed. What the mail server's pipe or a person hands
`record_mail_bounce`."""

from __future__ import annotations

from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage, Message

MAX_REASON_LENGTH = 500


@dataclass(frozen=True)
class Bounce:
    message_id: str  # of the mail that came back, <...@...>
    failed: bool  # Action: failed (a delay is not a bounce)
    reason: str  # Status and Diagnostic-Code, as the reporting server said them


def read_bounce(raw: bytes) -> Bounce | None:
    """The bounce in a DSN; None when it is not one (no delivery-status part, or no
    returned Message-ID to say which mail it is about)."""
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
                returned = str(first.get("Message-ID", "")).strip()
        elif kind == "text/rfc822-headers" and not returned:
            assert isinstance(part, EmailMessage)
            headers = message_from_bytes(part.get_content().encode(), policy=policy.default)
            returned = str(headers.get("Message-ID", "")).strip()
    recipients = status[1:]  # the first block is the reporting server's
    if not recipients or not returned:
        return None
    first = recipients[0]
    action = str(first.get("Action", "")).strip().lower()
    said = " ".join(
        str(first.get(name, "")).strip()
        for name in ("Status", "Diagnostic-Code")
        if first.get(name)
    )
    return Bounce(returned, action == "failed", said[:MAX_REASON_LENGTH] or action)
