"""Admin sign-in resists guessing (django-axes): after LOGIN_FAILURE_LIMIT wrong passwords
from an address the right one does not work either, from that address for anyone, until
the lockout ends, while the same user signs in from elsewhere (a user name alone locks
nothing: a stranger could lock out anyone); every failure is logged, never the password."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.urls import reverse
from django.utils import timezone

pytestmark = pytest.mark.django_db

LOGIN = reverse("admin:login")
PASSWORD = "the-right-password-42"
WRONG = "hunter2-wrong-guess"


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("sam", password=PASSWORD, is_staff=True)


def sign_in(client, username, password, address="10.0.0.1"):
    return client.post(
        LOGIN,
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_after_the_limit_even_the_right_password_is_refused(client, staff, settings, caplog):
    caplog.set_level(logging.INFO)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, "sam", WRONG).status_code == 200  # the form, with its error
    assert sign_in(client, "sam", WRONG).status_code == 429  # the last one allowed locks

    response = sign_in(client, "sam", PASSWORD)

    assert response.status_code == 429
    assert b"Signing in is locked for a while" in response.content
    assert b"15 minutes" in response.content
    assert not signed_in(client)
    failures = [r.getMessage() for r in caplog.records if "login failure" in r.getMessage()]
    assert len(failures) >= settings.AXES_FAILURE_LIMIT  # each one, and the lock
    assert all("sam" in line and "10.0.0.1" in line for line in failures)
    everything_logged = "\n".join(r.getMessage() for r in caplog.records)
    assert WRONG not in everything_logged and PASSWORD not in everything_logged
    stored = AccessAttempt.objects.get(username="sam")
    assert WRONG not in stored.post_data and PASSWORD not in stored.post_data


def test_the_lock_holds_for_the_address_and_not_for_the_user_from_elsewhere(
    client, staff, settings, django_user_model
):
    django_user_model.objects.create_user("kim", password=PASSWORD, is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "sam", WRONG)

    assert sign_in(client, "kim", PASSWORD, address="10.0.0.1").status_code == 429
    assert sign_in(client, "kim", PASSWORD, address="10.9.9.9").status_code == 302
    client.logout()
    assert sign_in(client, "sam", PASSWORD, address="10.9.9.9").status_code == 302
    assert signed_in(client)


def test_the_lock_ends_after_the_lockout_time(client, staff, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "sam", WRONG)
    assert sign_in(client, "sam", PASSWORD).status_code == 429

    AccessAttempt.objects.update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )

    assert sign_in(client, "sam", PASSWORD).status_code == 302
    assert signed_in(client)


def test_a_successful_sign_in_starts_the_count_again(client, staff, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "sam", WRONG)
    assert sign_in(client, "sam", PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "sam", WRONG)

    assert sign_in(client, "sam", PASSWORD).status_code == 302


def test_the_limit_comes_from_the_settings(client, staff, settings):
    settings.AXES_FAILURE_LIMIT = 2
    sign_in(client, "sam", WRONG)
    sign_in(client, "sam", WRONG)

    assert sign_in(client, "sam", PASSWORD).status_code == 429


class TestAnIpv6Client:
    """One host has a whole /64 and can take a new address in it for every guess: the lock
    counts the /64 (DJANGO_CLIENT_IPV6_PREFIX_LENGTH)."""

    def test_twelve_wrong_passwords_from_twelve_addresses_of_one_64_lock_it(self, client, staff):
        for n in range(1, 13):
            sign_in(client, "sam", WRONG, address=f"2001:db8:5:6::{n:x}")

        assert sign_in(client, "sam", PASSWORD, address="2001:db8:5:6::abcd").status_code == 429
        assert not signed_in(client)

    def test_a_client_in_another_64_is_not_locked(self, client, staff):
        for n in range(1, 13):
            sign_in(client, "sam", WRONG, address=f"2001:db8:5:6::{n:x}")

        assert sign_in(client, "sam", PASSWORD, address="2001:db8:5:7::1").status_code == 302
        assert signed_in(client)

    def test_ipv4_addresses_still_count_alone_and_ipv4_mapped_ones_as_ipv4(
        self, client, staff, settings
    ):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            sign_in(client, "sam", WRONG, address="::ffff:10.0.0.1")

        assert sign_in(client, "sam", PASSWORD, address="10.0.0.1").status_code == 429
        assert sign_in(client, "sam", PASSWORD, address="10.0.0.2").status_code == 302
