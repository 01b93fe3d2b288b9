"""The API's limit on wrong keys counts an IPv6 client by its network
(DJANGO_CLIENT_IPV6_PREFIX_LENGTH, default 64): a host that takes a new address in its /64
for every guess is limited like one address; another /64 is not; IPv4 is unchanged."""

from __future__ import annotations

import pytest

from ledger_app.models import RateCounter
from tests.clock import start_of_a_window

pytestmark = pytest.mark.django_db

WRONG = "sk_test_not_a_key_0123456789"


@pytest.fixture(autouse=True)
def twenty_a_minute(settings, time_machine):
    settings.API_AUTH_FAILURE_LIMIT = "20/minute"  # the shipped default
    # A test's requests all fall into one window: its clock starts a second into a new one.
    time_machine.move_to(start_of_a_window(60), tick=True)


def wrong_key(client, address):
    return client.get("/v1/charges", HTTP_AUTHORIZATION=f"Bearer {WRONG}", REMOTE_ADDR=address)


def test_thirty_wrong_keys_from_thirty_addresses_of_one_64_get_429(client):
    answers = [wrong_key(client, f"2001:db8:7:1::{n:x}").status_code for n in range(1, 31)]

    assert answers == [401] * 20 + [429] * 10
    assert list(RateCounter.objects.values_list("key", flat=True)) == [
        "api-auth-failures:2001:db8:7:1::/60s"
    ]


def test_a_client_in_another_64_is_not_limited(client):
    for n in range(1, 31):
        wrong_key(client, f"2001:db8:7:1::{n:x}")

    assert wrong_key(client, "2001:db8:7:2::1").status_code == 401


def test_with_a_prefix_of_128_each_address_counts_alone(client, settings):
    settings.CLIENT_IPV6_PREFIX_LENGTH = 128

    answers = [wrong_key(client, f"2001:db8:7:1::{n:x}").status_code for n in range(1, 31)]

    assert answers == [401] * 30


def test_ipv4_clients_and_ipv4_mapped_ones_count_by_their_own_address(client):
    for _ in range(20):
        wrong_key(client, "198.51.100.7")

    assert wrong_key(client, "::ffff:198.51.100.7").status_code == 429
    assert wrong_key(client, "198.51.100.8").status_code == 401
