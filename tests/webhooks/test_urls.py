"""Which URLs may receive webhooks: http(s) with a host whose every address is public,
checked when the endpoint is saved and again before each delivery."""

import socket

import pytest

from ledger_app.errors import InvalidWebhookUrl
from ledger_app.events.delivery import deliver_due
from ledger_app.events.endpoints import (
    EndpointChanges,
    check_url,
    create_endpoint,
    update_endpoint,
)
from ledger_app.models import WebhookDelivery
from tests.webhooks.conftest import record_events

PUBLIC = "93.184.215.14"


@pytest.fixture
def dns(monkeypatch):
    """Names resolve to what the test says; anything else fails to resolve."""
    table: dict[str, list[str]] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host in table:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in table[host]]
        return literal_only(host, port)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


def literal_only(host, port, *args, **kwargs):
    """getaddrinfo for address literals only, as with no DNS at all."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.inet_pton(family, host)
    except OSError:
        raise socket.gaierror(f"{host} not found") from None
    return [(family, socket.SOCK_STREAM, 6, "", (host, port))]


@pytest.fixture
def no_dns(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", literal_only)


@pytest.mark.usefixtures("no_dns")
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hooks",  # loopback
        "http://[::1]:8080/hooks",
        "http://10.0.0.5/hooks",  # private
        "https://192.168.1.10/hooks",
        "http://172.16.0.1/hooks",
        "http://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
        "http://0.0.0.0/hooks",  # unspecified
        "http://224.0.0.1/hooks",  # multicast
        "http://240.0.0.1/hooks",  # reserved
        "http://100.64.0.1/hooks",  # shared address space
        "http://[::ffff:127.0.0.1]/hooks",  # loopback, IPv4-mapped
        "http://[fd00::1]/hooks",  # unique local
    ],
)
def test_private_and_local_addresses_are_refused(url):
    with pytest.raises(InvalidWebhookUrl) as refused:
        check_url(url)

    assert (refused.value.code, refused.value.param) == ("url_invalid", "url")
    assert "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)" in refused.value.message


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hooks",
        "file:///etc/passwd",
        "http:///hooks",  # no host
        "https://",
        "hooks.example.com/x",  # no scheme
        "http://exa mple.com/",
        "http://example.com/\n",
        "http://[::1/",  # not a URL at all
        "http://example.com:99999/",  # no such port
        "",
        "http://e.com/" + "a" * 2048,
        None,
        42,
    ],
)
def test_what_is_not_an_http_url_with_a_host_is_refused(url, allow_private):
    """Refused even where private addresses are allowed: these are not URLs to send to."""
    with pytest.raises(InvalidWebhookUrl):
        check_url(url)


def test_a_public_host_is_accepted(dns):
    dns["hooks.example.com"] = [PUBLIC]

    assert check_url("https://hooks.example.com/stripe") == "https://hooks.example.com/stripe"


def test_a_name_with_any_private_address_is_refused(dns):
    dns["mixed.example.com"] = [PUBLIC, "10.1.2.3"]

    with pytest.raises(InvalidWebhookUrl, match="10.1.2.3"):
        check_url("https://mixed.example.com/")


def test_a_name_that_does_not_resolve_is_refused(no_dns):
    with pytest.raises(InvalidWebhookUrl, match="could not be resolved"):
        check_url("https://nowhere.invalid/")


def test_the_setting_allows_loopback(allow_private):
    assert check_url("http://127.0.0.1:8000/hooks") == "http://127.0.0.1:8000/hooks"
    assert check_url("http://localhost/hooks") == "http://localhost/hooks"


@pytest.mark.django_db
def test_create_and_update_check_the_url(no_dns):
    with pytest.raises(InvalidWebhookUrl):
        create_endpoint(url="http://127.0.0.1/h", enabled_events=["*"])
    endpoint = create_endpoint(url=f"http://{PUBLIC}/h", enabled_events=["*"])

    with pytest.raises(InvalidWebhookUrl):
        update_endpoint(endpoint.pk, EndpointChanges(url="http://10.0.0.1/h"))

    endpoint.refresh_from_db()
    assert endpoint.url == f"http://{PUBLIC}/h"


@pytest.mark.django_db
def test_a_host_that_turns_private_after_it_was_saved_is_not_sent_to(dns, receiver):
    """DNS may change: the address is checked again before every delivery."""
    dns["hooks.example.com"] = [PUBLIC]
    create_endpoint(url=f"http://hooks.example.com:{receiver.port}/h", enabled_events=["*"])
    record_events(1)
    dns["hooks.example.com"] = ["127.0.0.1"]

    tally = deliver_due()

    assert receiver.received == []
    assert dict(tally.statuses) == {"refused": 2}  # the charge's event and the one recorded
    for delivery in WebhookDelivery.objects.all():
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == (
            "pending",
            1,
            None,
        )
        assert delivery.last_error == (
            "refused: address 127.0.0.1 of hooks.example.com is loopback "
            "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
        )
