"""The signed link in each mail to its refund's status page: the refund's id, the mail's
language and a digest of the address the mail went to, signed with the secret key, good
for REFUND_STATUS_LINK_DAYS from when the mail was sent. Nothing about the customer can be
read from it. When staff give the refund's mails a new address, the links in mails to the
old one stop working (whoever had the old address may not be the customer)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.urls import reverse
from django.utils.crypto import constant_time_compare, salted_hmac

SALT = "ledger_app.customer_mail.status_link"
MAX_PART = 64


@dataclass(frozen=True)
class StatusLink:
    refund_id: str
    language: str
    address_digest: str
    expired: bool

    def sent_to(self, address: str) -> bool:
        """Whether the link came in a mail to `address` (the refund's address now), under
        the secret key or one of its fallbacks (a rotated key keeps its links working, as
        the signature does)."""
        keys = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
        return any(
            constant_time_compare(self.address_digest, address_digest(address, key)) for key in keys
        )


def address_digest(address: str, secret: str | bytes | None = None) -> str:
    """An HMAC of an address under the secret key: the same address gives the same one,
    and without the key no address can be tried against it."""
    normal = address.strip().lower()
    return salted_hmac(SALT, normal, secret=secret, algorithm="sha256").hexdigest()[:DIGEST]


DIGEST = 24  # hex digits: 96 bits


def status_url(refund_id: str, language: str, address: str) -> str:
    """The link to put in a mail about `refund_id`, in `language`, to `address`."""
    token = signing.dumps([refund_id, language, address_digest(address)], salt=SALT, compress=False)
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
        or len(value) != 3
        or not all(isinstance(part, str) and 0 < len(part) <= MAX_PART for part in value)
    ):
        return None
    refund_id, language, digest = value
    try:
        signing.loads(token, salt=SALT, max_age=timedelta(days=settings.REFUND_STATUS_LINK_DAYS))
    except signing.SignatureExpired:
        return StatusLink(refund_id, _known(language), digest, expired=True)
    return StatusLink(refund_id, _known(language), digest, expired=False)


def _known(language: str) -> str:
    codes = [code for code, _ in settings.LANGUAGES]
    return language if language in codes else codes[0]
