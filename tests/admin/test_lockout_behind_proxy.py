"""Admin sign-in behind the documented proxy (DJANGO_TRUSTED_PROXY_COUNT=1; the proxy
appends the address it received the request from to X-Forwarded-For): each client is
locked out by its own address, whatever it writes in the header, and nobody can lock out
someone signing in from elsewhere."""

from __future__ import annotations

import logging

import pytest
from axes.models import AccessAttempt
from django.urls import reverse

pytestmark = pytest.mark.django_db

LOGIN = reverse("admin:login")
PASSWORD = "the-right-password-42"
WRONG = "hunter2-wrong-guess"
PROXY = "10.0.0.2"  # the proxy's own address: REMOTE_ADDR of everything it forwards
LEAD = "198.51.100.7"
STRANGER = "203.0.113.66"


@pytest.fixture(autouse=True)
def behind_one_proxy(settings):
    settings.TRUSTED_PROXY_COUNT = 1
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def lead(django_user_model):
    return django_user_model.objects.create_user("lead", password=PASSWORD, is_staff=True)


@pytest.fixture
def kim(django_user_model):
    return django_user_model.objects.create_user("kim", password=PASSWORD, is_staff=True)


def forwarded(client_ip: str, sent: str | None = None) -> dict[str, str]:
    """What gunicorn sees from the proxy: X-Forwarded-For as the client sent it (if it did)
    with the client's address appended, like nginx's $proxy_add_x_forwarded_for."""
    header = f"{sent}, {client_ip}" if sent else client_ip
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": header}


def sign_in(client, username, password, client_ip, sent=None):
    return client.post(
        LOGIN,
        {"username": username, "password": password, "next": "/admin/"},
        **forwarded(client_ip, sent),
    )


class TestAnHonestClient:
    def test_its_failures_are_stored_under_its_own_address(self, client, lead):
        sign_in(client, "lead", WRONG, LEAD)

        assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [LEAD]

    def test_it_is_locked_out_after_the_limit_even_with_the_right_password(
        self, client, lead, settings
    ):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(client, "lead", WRONG, LEAD)

        assert sign_in(client, "lead", PASSWORD, LEAD).status_code == 429

    def test_a_client_behind_its_own_proxy_is_still_known_by_the_address_we_saw(
        self, client, lead, settings
    ):
        # An office proxy in front of ours adds the workstation's private address; ours
        # appends the office's public one, which is the address that counts.
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(client, "lead", WRONG, LEAD, sent="192.168.1.20")

        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {LEAD}
        assert sign_in(client, "lead", PASSWORD, LEAD).status_code == 429


class TestAStrangerTryingToLockSomeoneOut:
    def test_the_lead_signing_in_from_elsewhere_is_not_locked_out(self, client, lead, settings):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(client, "lead", WRONG, STRANGER)

        response = sign_in(client, "lead", PASSWORD, LEAD)

        assert response.status_code == 302
        assert "_auth_user_id" in client.session

    def test_the_stranger_is_locked_out_whichever_user_it_tries_next(
        self, client, lead, kim, settings
    ):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(client, "lead", WRONG, STRANGER)

        assert sign_in(client, "kim", PASSWORD, STRANGER).status_code == 429
        assert sign_in(client, "kim", PASSWORD, LEAD).status_code == 302


class TestASpoofingClient:
    def test_forged_entries_do_not_change_its_address(self, client, lead, kim, settings):
        # Each guess at another user name, each with a new forged leftmost entry (and once
        # two X-Forwarded-For headers, which the server joins with a comma).
        forged = [f"192.0.2.{n}" for n in range(settings.AXES_FAILURE_LIMIT - 1)]
        forged.append("192.0.2.200,192.0.2.201")
        for n, sent in enumerate(forged):
            sign_in(client, f"guess-{n}", WRONG, STRANGER, sent=sent)

        locked = sign_in(client, "kim", PASSWORD, STRANGER, sent="192.0.2.250")

        assert locked.status_code == 429
        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {STRANGER}
        assert sign_in(client, "lead", PASSWORD, LEAD).status_code == 302

    def test_its_failures_are_logged_with_the_user_name_and_its_real_address(self, client, caplog):
        caplog.set_level(logging.WARNING, logger="axes")

        sign_in(client, "lead\nAXES: forged line", WRONG, STRANGER, sent="192.0.2.9")

        [failure] = [r.getMessage() for r in caplog.records if "login failure" in r.getMessage()]
        assert '{username: "lead\\nAXES: forged line", ip_address: "203.0.113.66"' in failure
        assert "\n" not in failure and "192.0.2.9" not in failure

    def test_a_header_that_is_not_an_address_does_not_reach_the_database(self, client, lead):
        response = sign_in(client, "lead", WRONG, STRANGER, sent="unknown, ' OR 1=1 --, \x00")

        assert response.status_code == 200
        assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [STRANGER]


class TestAnIpv6ClientBehindTheProxy:
    def test_twelve_addresses_of_one_64_lock_it_whatever_it_writes(self, client, lead, kim):
        for n in range(1, 13):
            sign_in(client, "lead", WRONG, f"2001:db8:9:1::{n:x}", sent=f"2001:db8:{n:x}::1")

        assert sign_in(client, "kim", PASSWORD, "[2001:db8:9:1::ffff]:443").status_code == 429
        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"2001:db8:9:1::"}

    def test_a_client_in_another_64_is_not_locked(self, client, lead):
        for n in range(1, 13):
            sign_in(client, "lead", WRONG, f"2001:db8:9:1::{n:x}")

        assert sign_in(client, "lead", PASSWORD, "2001:db8:9:2::1").status_code == 302
        assert "_auth_user_id" in client.session
