"""Second factors (TOTP, django-otp) for staff who move money: enrolment, and what a
person needs to add the factor to an authenticator app."""

from __future__ import annotations

import io
from base64 import b32encode

import qrcode
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django_otp.plugins.otp_totp.models import TOTPDevice

DEVICE_NAME = "authenticator"


@transaction.atomic
def enrol_totp(user: AbstractBaseUser) -> TOTPDevice:
    """A new confirmed TOTP device for `user`, replacing any earlier one (a lost phone)."""
    TOTPDevice.objects.filter(user=user).delete()
    return TOTPDevice.objects.create(user=user, name=DEVICE_NAME, confirmed=True)


def enrolment_instructions(device: TOTPDevice) -> str:
    """What to print once for the person: a QR code for the terminal, the otpauth URL and
    the secret to type in by hand."""
    code = qrcode.QRCode(border=1)
    code.add_data(device.config_url)
    picture = io.StringIO()
    code.print_ascii(out=picture, invert=True)
    secret = b32encode(device.bin_key).decode()
    grouped = " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))
    return (
        "Second factor: scan this with an authenticator app (Google Authenticator, "
        "1Password, FreeOTP, ...), or enter the secret by hand.\n"
        f"{picture.getvalue()}"
        f"  otpauth URL: {device.config_url}\n"
        f"  secret:      {grouped}  (TOTP, SHA1, 6 digits, 30 s)\n"
        "The admin asks for a code from it before every refund after a few idle minutes."
    )
