"""Staff sessions that may move money: logged in, then a code from the person's own
authenticator entered on the admin's code page, as a person does."""

from __future__ import annotations

from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger_app.access.second_factor import enrol_totp


def device_of(user) -> TOTPDevice:
    """The user's authenticator, enrolled (as create_support_agent does) if they have none."""
    return TOTPDevice.objects.filter(user=user, confirmed=True).first() or enrol_totp(user)


def current_code(device: TOTPDevice) -> str:
    """What the person's authenticator app shows now."""
    device.refresh_from_db()
    code = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{code:0{device.digits}d}"


def verified(client, user):
    """`client` logged in as `user` with a fresh second factor, through the code page.

    A code is accepted once: a second session of the same person within the same 30 s
    step would be refused, as it is for a person, so such tests use two people."""
    client.force_login(user)
    response = client.post(
        reverse("verify-second-factor"), {"code": current_code(device_of(user)), "next": "/admin/"}
    )
    assert response.status_code == 302, f"the code page refused the code: {response.content[:300]}"
    return client
