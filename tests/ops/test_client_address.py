"""The client's address comes from one function (serving/client_address.py): behind
DJANGO_TRUSTED_PROXY_COUNT proxies it is the entry that many places from the right of
X-Forwarded-For, never one the client wrote; the admin lockout, the API's limit on wrong
keys and the logs all use it; and a setting it cannot work with refuses to start."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.http import HttpRequest
from django.test import RequestFactory
from django.urls import reverse
from rest_framework.request import Request

from ledger_app.api.authentication import ApiKeyThrottle
from ledger_app.models import RateCounter
from serving.client_address import UNKNOWN_ADDRESS, client_address, counted_address
from serving.logs import LogContextFilter
from tests.clock import start_of_a_window
from tests.processes import run_command

ROOT = Path(__file__).resolve().parents[2]
PROXY = "10.0.0.2"  # the proxy's own address: REMOTE_ADDR of everything it forwards
HONEST = "198.51.100.7"
SPOOFER = "203.0.113.66"
WRONG_KEY = "sk_test_not_a_key_0123456789"


def forwarded(client_ip: str, sent: str | None = None) -> dict[str, str]:
    """What gunicorn sees from the documented proxy: X-Forwarded-For as the client sent
    it (if it did) with the client's address appended, like nginx's
    $proxy_add_x_forwarded_for."""
    header = f"{sent}, {client_ip}" if sent else client_ip
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": header}


def request_with(meta: dict[str, str], path: str = "/") -> HttpRequest:
    """A GET of `path` whose WSGI environ (META) holds `meta`."""
    request = RequestFactory().get(path)
    request.META.update(meta)
    return request


def address_of(meta: dict[str, str]) -> str:
    return client_address(request_with(meta))


@pytest.fixture
def proxies(settings):
    """Set the number of trusted proxies in front (DJANGO_TRUSTED_PROXY_COUNT)."""

    def behind(count: int) -> None:
        settings.TRUSTED_PROXY_COUNT = count

    return behind


class TestWithNoProxy:
    def test_it_is_the_connections_address_whatever_the_header_says(self, proxies):
        proxies(0)

        assert address_of({"REMOTE_ADDR": HONEST, "HTTP_X_FORWARDED_FOR": "192.0.2.1"}) == HONEST

    def test_a_connection_with_no_ip_address_is_the_unknown_address(self, proxies):
        proxies(0)

        assert address_of({"REMOTE_ADDR": ""}) == UNKNOWN_ADDRESS
        assert address_of({"REMOTE_ADDR": "unix:/run/gunicorn.sock"}) == UNKNOWN_ADDRESS


class TestBehindOneProxy:
    @pytest.mark.parametrize(
        "header",
        [
            HONEST,
            f"192.0.2.1, {HONEST}",
            f"192.0.2.1,192.0.2.2, {HONEST}",  # two headers, joined by the server
            f"  {HONEST}  ",
            f"unknown, not an address, , {HONEST}",
            f"{HONEST}:51234",  # a proxy that writes the port too
            f"192.0.2.1,, {HONEST}",  # the client's own header ended in a comma
        ],
    )
    def test_it_is_the_entry_the_proxy_appended(self, proxies, header):
        proxies(1)

        assert address_of({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": header}) == HONEST

    @pytest.mark.parametrize(
        ("entry", "address"),
        [
            ("2001:DB8::0:1", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("[2001:db8::1]:443", "2001:db8::1"),
            ("::ffff:198.51.100.7", HONEST),  # an IPv4 client seen by a dual-stack socket
            ("fe80::1%eth0", "fe80::1"),
        ],
    )
    def test_it_is_written_one_way_for_each_address(self, proxies, entry, address):
        proxies(1)

        assert address_of(forwarded(entry)) == address

    @pytest.mark.parametrize(
        "header",
        [
            "",
            " ",
            f"{HONEST}, unknown",
            f"{HONEST}, ",
            "_hidden",
            "198.51.100.7.1",
            "198.51.100.7:99999",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "\x00",
            "１９８.51.100.7",  # full-width digits
            "x" * 10_000,
        ],
    )
    def test_an_entry_that_is_not_an_address_gives_the_connections_address(self, proxies, header):
        proxies(1)

        assert address_of({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": header}) == PROXY

    def test_a_request_that_did_not_come_through_the_proxy_is_its_connections_address(
        self, proxies
    ):
        # E.g. something inside the network asking gunicorn directly: its address is real.
        proxies(1)

        assert address_of({"REMOTE_ADDR": "10.0.5.5"}) == "10.0.5.5"

    def test_a_header_of_any_length_is_read_from_its_end_only(self, proxies):
        proxies(1)
        header = ", ".join(["192.0.2.1"] * 20_000 + [HONEST])

        started = time.perf_counter()
        address = address_of({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": header})

        assert address == HONEST
        assert time.perf_counter() - started < 0.05


class TestBehindTwoProxies:
    def test_it_is_the_entry_the_outer_proxy_appended(self, proxies):
        proxies(2)
        meta = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"192.0.2.1, {HONEST}, 10.0.0.9"}

        assert address_of(meta) == HONEST

    def test_too_few_entries_give_the_connections_address_not_the_leftmost(self, proxies):
        # Only one entry: the request skipped the outer proxy, or the client wrote it.
        proxies(2)

        assert address_of({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": SPOOFER}) == PROXY


# --- what the lockout and the limits count a client by -----------------------------------


def counted_as(meta: dict[str, str]) -> str:
    return counted_address(request_with(meta))


class TestAnIpv6ClientIsCountedByItsNetwork:
    @pytest.mark.parametrize(
        ("address", "counted"),
        [
            ("2001:db8:1:2::1", "2001:db8:1:2::"),
            ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"),
            ("2001:db8:1:3::1", "2001:db8:1:3::"),
            ("::ffff:198.51.100.7", HONEST),  # IPv4-mapped: the IPv4 address alone
            (HONEST, HONEST),
            ("10.0.5.5", "10.0.5.5"),
        ],
    )
    def test_with_no_proxy(self, proxies, address, counted):
        proxies(0)

        assert counted_as({"REMOTE_ADDR": address}) == counted

    def test_behind_the_proxy_it_is_the_network_of_the_entry_the_proxy_appended(self, proxies):
        proxies(1)

        assert counted_as(forwarded("[2001:db8:1:2:a:b:c:d]:443", sent="192.0.2.1")) == (
            "2001:db8:1:2::"
        )
        assert counted_as(forwarded(HONEST, sent="2001:db8:1:2::1")) == HONEST

    def test_the_prefix_length_comes_from_the_settings(self, proxies, settings):
        proxies(0)
        meta = {"REMOTE_ADDR": "2001:db8:1:2:a:b:c:d"}

        settings.CLIENT_IPV6_PREFIX_LENGTH = 48
        assert counted_as(meta) == "2001:db8:1::"
        settings.CLIENT_IPV6_PREFIX_LENGTH = 128
        assert counted_as(meta) == "2001:db8:1:2:a:b:c:d"

    def test_a_client_with_no_ip_address_is_still_the_unknown_address(self, proxies):
        proxies(0)

        assert counted_as({"REMOTE_ADDR": "unix:/run/gunicorn.sock"}) == UNKNOWN_ADDRESS


# --- every caller, through the real views ---------------------------------------------


@pytest.fixture
def three_wrong_keys_a_minute(settings, time_machine):
    settings.API_AUTH_FAILURE_LIMIT = "3/minute"
    # A test's requests all fall into one window: its clock starts a second into a new one.
    time_machine.move_to(start_of_a_window(60), tick=True)


def wrong_key(client, client_ip, sent=None):
    return client.get(
        "/v1/charges", HTTP_AUTHORIZATION=f"Bearer {WRONG_KEY}", **forwarded(client_ip, sent)
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("three_wrong_keys_a_minute")
class TestTheApiLimitBehindTheProxy:
    def test_an_honest_client_gets_429_past_the_limit_and_others_do_not(self, client, proxies):
        proxies(1)

        answers = [wrong_key(client, HONEST).status_code for _ in range(4)]

        assert answers == [401, 401, 401, 429]
        assert wrong_key(client, "198.51.100.8").status_code == 401

    def test_a_spoofing_client_gets_429_whatever_it_writes_in_the_header(self, client, proxies):
        proxies(1)

        answers = [wrong_key(client, SPOOFER, sent=f"192.0.2.{n}").status_code for n in range(30)]

        assert answers == [401] * 3 + [429] * 27
        assert wrong_key(client, HONEST, sent=SPOOFER).status_code == 401

    def test_an_ipv6_client_rotating_through_its_64_gets_429(self, client, proxies):
        proxies(1)

        answers = [wrong_key(client, f"2001:db8:1:2::{n:x}").status_code for n in range(1, 31)]

        assert answers == [401] * 3 + [429] * 27
        assert wrong_key(client, "2001:db8:1:3::1").status_code == 401


class CapturedLines(logging.Handler):
    """The records the loggers write, with what the log filter puts on them."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(LogContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured_lines():
    handler = CapturedLines()
    loggers = [logging.getLogger(name) for name in ("axes", "ledger_app.api.authentication")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


@pytest.mark.django_db
@pytest.mark.usefixtures("three_wrong_keys_a_minute")
class TestEveryCallerAgrees:
    @pytest.mark.parametrize(
        ("count", "meta"),
        [
            (0, {"REMOTE_ADDR": HONEST, "HTTP_X_FORWARDED_FOR": "192.0.2.1"}),
            (1, forwarded(HONEST, sent="192.0.2.1")),
            (2, {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"192.0.2.1, {HONEST}, 10.0.0.9"}),
        ],
    )
    def test_the_lockout_the_api_limit_and_the_logs_name_the_same_address(
        self, client, proxies, settings, captured_lines, count, meta
    ):
        proxies(count)
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
        expected = address_of(meta)

        client.post(reverse("admin:login"), {"username": "nobody", "password": "x"}, **meta)
        client.get("/v1/charges", HTTP_AUTHORIZATION=f"Bearer {WRONG_KEY}", **meta)

        assert expected == HONEST
        assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == [expected]
        assert list(RateCounter.objects.values_list("key", flat=True)) == [
            f"api-auth-failures:{expected}/60s"
        ]
        axes_failure = [r for r in captured_lines if "login failed" in r.getMessage()]
        api_failure = [r for r in captured_lines if "API authentication failed" in r.getMessage()]
        assert axes_failure and api_failure
        assert all(r.client_address == expected for r in axes_failure + api_failure)
        assert api_failure[0].getMessage() == f"API authentication failed from {expected}"

    def test_the_per_key_limit_counts_a_request_without_a_key_by_the_same_address(self, proxies):
        proxies(1)
        request = request_with(forwarded(HONEST, sent=SPOOFER), "/v1/charges")

        assert ApiKeyThrottle().get_ident(Request(request)) == HONEST

    def test_django_axes_asks_the_one_function(self):
        assert django_settings.AXES_CLIENT_IP_CALLABLE == "serving.client_address.counted_address"

    def test_nothing_else_reads_the_address_from_the_request(self):
        reads = re.compile(
            r"REMOTE_ADDR|X_FORWARDED_FOR|headers.{0,10}forwarded-for|get_client_ip|ipware", re.I
        )
        sources = [
            path
            for folder in ("backoffice", "ledger_app", "serving", "simulated_provider")
            for path in (ROOT / folder).rglob("*.py")
        ]

        readers = [
            f"{path.relative_to(ROOT)}:{number}"
            for path in sources
            if path.name != "client_address.py"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if reads.search(line) and not line.lstrip().startswith("#")
        ]

        assert len(sources) > 50 and readers == []


# --- settings the address cannot be known with ----------------------------------------


class TestTheSettingRefusesToStart:
    @pytest.mark.parametrize("value", ["-1", "one", "1.5", "+1", "١"])
    def test_a_proxy_count_that_is_not_a_whole_number_of_proxies(self, value):
        done = run_command("check", DJANGO_TRUSTED_PROXY_COUNT=value)

        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("error: DJANGO_TRUSTED_PROXY_COUNT must be")

    @pytest.mark.parametrize("value", ["0", "129", "-64", "sixty-four", "64.0", "６４"])
    def test_an_ipv6_prefix_length_that_is_not_1_to_128(self, value):
        done = run_command("check", DJANGO_CLIENT_IPV6_PREFIX_LENGTH=value)

        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("error: DJANGO_CLIENT_IPV6_PREFIX_LENGTH must be")

    @pytest.mark.parametrize("count", ["", "0"])
    def test_a_tls_proxy_in_front_with_no_proxy_counted(self, count):
        # Every client would share the proxy's address: one stranger's wrong passwords
        # would lock everyone out, and one flood of wrong keys would limit every client.
        done = run_command(
            "check", DJANGO_BEHIND_TLS_PROXY="true", DJANGO_TRUSTED_PROXY_COUNT=count
        )

        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("error: DJANGO_BEHIND_TLS_PROXY=true needs")

    def test_a_tls_proxy_counted_starts(self):
        done = run_command("check", DJANGO_BEHIND_TLS_PROXY="true", DJANGO_TRUSTED_PROXY_COUNT="1")

        assert done.returncode == 0, done.stderr
