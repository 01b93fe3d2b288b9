"""The signed link in each mail to its refund's status page: the refund's id and the
mail's language, signed with the secret key, good for REFUND_STATUS_LINK_DAYS from when
the mail was sent. Nothing else about the customer is in it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.urls import reverse

SALT = "ledger_app.customer_mail.status_link"


@dataclass(frozen=True)
class StatusLink:
    refund_id: str
    language: str
    expired: bool


def status_url(refund_id: str, language: str) -> str:
    token = signing.dumps([refund_id, language], salt=SALT, compress=False)
    return settings.REFUND_STATUS_BASE_URL + reverse("refund-status", args=[token])


def read_link(token: str) -> StatusLink | None:
    """What a link names, and whether it has expired; None when it was not signed here
    (altered, made up, signed with another key)."""
    try:
        value = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(part, str) and 0 < len(part) <= 64 for part in value)
    ):
        return None
    try:
        signing.loads(token, salt=SALT, max_age=timedelta(days=settings.REFUND_STATUS_LINK_DAYS))
    except signing.SignatureExpired:
        return StatusLink(value[0], _known(value[1]), expired=True)
    return StatusLink(value[0], _known(value[1]), expired=False)


def _known(language: str) -> str:
    codes = [code for code, _ in settings.LANGUAGES]
    return language if language in codes else codes[0]
