"""What the browser tests do in the admin as a person would (log in, enter the code their
authenticator shows, fill the refund form, wait for the server to settle), the staff they
do it as, and where the admin's pages are."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils.http import urlencode
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger_app.models import Charge, Refund
from tests.factories import AGENTS_MIGRATION, ChargeFactory, migration_group
from tests.second_factor import current_code, verified

AGENT = ("agent", "agent-pass-123")
VIEWER = ("viewer", "viewer-pass-1")


def log_in(page, username: str, password: str) -> None:
    """Through the real login form, as a person would; then, for someone with an
    authenticator, the code it shows through the admin's code page (what the first refund
    would ask for)."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    assert page.locator("#user-tools").is_visible(), page.content()
    device = TOTPDevice.objects.filter(user__username=username, confirmed=True).first()
    if device is not None:
        enter_code(page, device)


def signed_in(page, user, server_url: str) -> None:
    """The page's browser holding a session of `user`, second factor entered: made with
    Django's test client (force_login, then the code page, as tests.second_factor.verified
    does) and handed to the browser as its session cookie. About a second sooner than
    log_in's four pages; the tests that are about logging in use log_in."""
    client = verified(Client(), user)
    cookie = settings.SESSION_COOKIE_NAME
    page.context.add_cookies(
        [{"name": cookie, "value": client.cookies[cookie].value, "url": server_url}]
    )


def enter_code(page, device, next_url: str = "/admin/") -> None:
    """On the code page, the code the person's authenticator shows now."""
    page.goto(f"{reverse('verify-second-factor')}?{urlencode({'next': next_url})}")
    page.fill("input[name=code]", current_code(device))
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_url}")


def support_agents_group() -> Group:
    """The "Support agents" group the data migration made."""
    return migration_group(AGENTS_MIGRATION)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """For work the live server may still be finishing after the browser has its answer."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the server to settle")
        time.sleep(0.05)


REFUND_BUTTON = "#refund-form input[type=submit][name=_refund]"
CHANGELIST = "admin:ledger_app_charge_changelist"


def new_charge(**fields) -> Charge:
    return ChargeFactory(**{"amount": 5_000, "currency": "usd", **fields})


def change_url(charge) -> str:
    # As the admin links objects: quote() escapes "_" in ids (ch_bx -> ch_5Fbx).
    return reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)])


def refund_url(charge) -> str:
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


def at(*paths: str):
    """For wait_for_url: the page is at one of these paths (any host and query)."""
    return lambda url: urlsplit(url).path in paths


def at_charge_page(charge):
    return at(change_url(charge))


def settled(charge) -> bool:
    """Inline dispatch finishes after the response is sent; wait for it before asserting."""
    return not Refund.objects.filter(charge=charge, status=Refund.Status.PENDING).exists()


def fill_refund_form(page, amount: str, reason: str = "requested_by_customer", note: str = ""):
    page.fill("#id_amount", amount)
    page.select_option("#id_reason", reason)
    if note:
        page.fill("#id_note", note)
