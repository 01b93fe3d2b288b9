"""The keys the admin's refund forms carry: minted and signed where a form is rendered, so
that a form takes only keys the back office issued (a key typed into the page or the URL,
another form's or a client's, is refused)."""

from __future__ import annotations

import re
import uuid

from django import forms
from django.core import signing

from ledger_app.idempotency.services import ADMIN_FORM_KEYS

FORM_KEY_SALT = "ledger_app.admin.form-key"
FORM_KEY_REFUSED = (
    "This form's key was not issued by this back office: open the page again "
    "(invalid_idempotency_key)."
)


def new_form_key(prefix: str = ADMIN_FORM_KEYS) -> str:
    """Minted when a form is rendered: every submission of that rendering shares it. It
    is `<prefix>:<32 hex>` signed (issued_key gives it back)."""
    return signing.Signer(salt=FORM_KEY_SALT).sign(f"{prefix}:{uuid.uuid4().hex}")


def issued_key(signed: object, prefix: str = ADMIN_FORM_KEYS) -> str | None:
    """The key new_form_key(prefix) signed as `signed`, or None for anything it did not
    issue (unsigned, forged, another prefix's)."""
    if not isinstance(signed, str):
        return None
    try:
        key = signing.Signer(salt=FORM_KEY_SALT).unsign(signed)
    except signing.BadSignature:
        return None
    return key if re.fullmatch(rf"{re.escape(prefix)}:[0-9a-f]{{32}}", key) else None


def unsigned_key(signed: str, prefix: str) -> str:
    """A form's own key field, cleaned: the key it was issued, else invalid_idempotency_key."""
    key = issued_key(signed, prefix)
    if key is None:
        raise forms.ValidationError(FORM_KEY_REFUSED, code="invalid_idempotency_key")
    return key
