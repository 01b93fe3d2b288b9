"""Rebinding through the egress proxy (issue 44, finding 4). A name that is public when we
check it and loopback when the proxy resolves it must not reach loopback through a proxy
that checks nothing, whether it routes by the request line or by the Host header: the
proxy is handed the address we checked, never the name. A proxy that checks addresses
itself, as Smokescreen does, keeps working, since what it is handed is public."""

from __future__ import annotations

import socket
import time

import pytest

from ledger_app.events import delivery as webhook_delivery
from ledger_app.events import egress
from tests.webhooks.proxy import Listener, Proxy, Site, self_signed

PUBLIC = "93.184.215.14"
PUBLIC6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
NAME = "rebind.example.test"
# What our resolver answers (at the check), and what the proxy's answers (at the proxy).
OURS = {NAME: PUBLIC, "other.example.test": PUBLIC, "six.example.test": PUBLIC6}
THE_PROXYS = {NAME: "127.0.0.1", "other.example.test": "127.0.0.1", "six.example.test": "::1"}


@pytest.fixture(autouse=True)
def our_resolver(monkeypatch):
    """getaddrinfo here answers from OURS; an address stands for itself."""

    def getaddrinfo(host, port, *args, **kwargs):
        address = OURS.get(host, host)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        socket.inet_pton(family, address)  # anything else does not resolve
        sockaddr = (address, port) if family == socket.AF_INET else (address, port, 0, 0)
        return [(family, socket.SOCK_STREAM, 6, "", sockaddr)]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def the_proxys_resolver(host: str) -> str:
    return THE_PROXYS.get(host, host)


@pytest.fixture
def internal():
    """The service on loopback that the rebinding name reaches at the proxy."""
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def tls(tmp_path, monkeypatch):
    """A certificate for NAME only, trusted by egress for the length of the test."""
    cert, context = self_signed(tmp_path, NAME)
    monkeypatch.setattr(egress, "CA_BUNDLE", str(cert))
    return context


def through(settings, checking: bool, context=None, public: str = PUBLIC):
    """A Site standing for `public` and a proxy (checking or not) set as WEBHOOK_PROXY_URL."""
    site = Site(context)
    proxy = Proxy(the_proxys_resolver, {public: site.port}, checking=checking)
    settings.WEBHOOK_PROXY_URL = proxy.url
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    return site, proxy


class TestANonCheckingProxy:
    def test_the_harness_is_live_the_name_reaches_loopback_at_the_proxy(self, internal):
        """What the old code handed the proxy (the name) reaches the internal service."""
        proxy = Proxy(the_proxys_resolver, {}, checking=False)
        try:
            upstream = proxy.dial(NAME, internal.port)
            assert isinstance(upstream, socket.socket), upstream
            upstream.close()
        finally:
            proxy.close()

        assert isinstance(upstream, socket.socket)
        assert _eventually(lambda: internal.connections == 1)

    def test_http_the_proxy_is_asked_for_the_checked_address_and_loopback_is_never_reached(
        self, settings, internal
    ):
        site, proxy = through(settings, checking=False)
        try:
            answer = egress.post(f"http://{NAME}:{internal.port}/h?a=1", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.asked == [f"{PUBLIC}:{internal.port}"]
        assert proxy.hosts == [f"{PUBLIC}:{internal.port}"]  # the name is nowhere in it
        assert answer.status == 204
        assert site.seen == [("/h?a=1", f"{PUBLIC}:{internal.port}")]

    def test_https_the_tunnel_goes_to_the_checked_address_and_tls_checks_the_name(
        self, settings, internal, tls
    ):
        site, proxy = through(settings, checking=False, context=tls)
        try:
            answer = egress.post(f"https://{NAME}:{internal.port}/h", b"{}", {}, timeout=5)
            with pytest.raises(egress.NoAnswer) as wrong_name:
                egress.post(f"https://other.example.test:{internal.port}/h", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.asked == [f"{PUBLIC}:{internal.port}"] * 2
        assert answer.status == 204
        assert site.seen == [("/h", f"{NAME}:{internal.port}")]
        assert wrong_name.value.reason.startswith("TLS certificate refused: ")
        assert "other.example.test" in wrong_name.value.reason

    def test_an_ipv6_address_is_handed_over_in_brackets(self, settings, internal):
        site, proxy = through(settings, checking=False, public=PUBLIC6)
        try:
            answer = egress.post(f"http://six.example.test:{internal.port}/h", b"{}", {}, 5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.asked == [f"[{PUBLIC6}]:{internal.port}"]
        assert proxy.hosts == [f"[{PUBLIC6}]:{internal.port}"]
        assert (answer.status, site.seen) == (204, [("/h", f"[{PUBLIC6}]:{internal.port}")])

    @pytest.mark.django_db
    def test_a_delivery_through_it_never_reaches_loopback(self, settings, internal):
        site, proxy = through(settings, checking=False)
        try:
            outcome = webhook_delivery.post(f"http://{NAME}:{internal.port}/h", "{}", "whsec_x")
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert outcome[0] == 204 and len(site.seen) == 1


def routing_by_host(settings, context=None, public: str = PUBLIC):
    """A Site standing for `public` and, as WEBHOOK_PROXY_URL, a proxy that checks nothing
    and goes where the Host header says (nginx: `proxy_pass http://$http_host$request_uri`)."""
    site = Site(context)
    proxy = Proxy(the_proxys_resolver, {public: site.port}, by_host=True)
    settings.WEBHOOK_PROXY_URL = proxy.url
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    return site, proxy


class TestAProxyThatRoutesByTheHostHeader:
    """The request line carries the checked address; a proxy that routes by `Host` would
    resolve whatever name that header carries, so over http it carries the address too."""

    def test_the_harness_is_live_a_host_header_with_the_name_reaches_loopback(self, internal):
        """The request line names the public address, the Host header the name: this
        proxy follows the header, to loopback, as the old code's requests made it do."""
        proxy = Proxy(the_proxys_resolver, {}, by_host=True)
        try:
            with socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]))) as c:
                c.sendall(
                    f"POST http://{PUBLIC}:{internal.port}/h HTTP/1.1\r\n"
                    f"Host: {NAME}:{internal.port}\r\nContent-Length: 0\r\n\r\n".encode()
                )
                c.settimeout(5)
                c.recv(1024)
        finally:
            proxy.close()

        assert _eventually(lambda: internal.connections == 1)

    def test_http_the_host_header_is_the_checked_address_and_loopback_is_never_reached(
        self, settings, internal
    ):
        site, proxy = routing_by_host(settings)
        try:
            answer = egress.post(f"http://{NAME}:{internal.port}/h?a=1", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.asked == proxy.hosts == [f"{PUBLIC}:{internal.port}"]
        assert (answer.status, site.seen) == (204, [("/h?a=1", f"{PUBLIC}:{internal.port}")])

    def test_a_host_header_given_by_the_caller_is_not_sent_on(self, settings, internal):
        site, proxy = routing_by_host(settings)
        try:
            answer = egress.post(
                f"http://{NAME}:{internal.port}/h", b"{}", {"host": NAME}, timeout=5
            )
        finally:
            proxy.close()
            site.close()

        assert (answer.status, internal.connections) == (204, 0)
        assert proxy.hosts == [f"{PUBLIC}:{internal.port}"]

    def test_ipv6_the_host_header_is_the_checked_address_in_brackets(self, settings, internal):
        site, proxy = routing_by_host(settings, public=PUBLIC6)
        try:
            answer = egress.post(f"http://six.example.test:{internal.port}/h", b"{}", {}, 5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.hosts == [f"[{PUBLIC6}]:{internal.port}"]
        assert (answer.status, site.seen) == (204, [("/h", f"[{PUBLIC6}]:{internal.port}")])

    def test_https_the_name_travels_only_inside_the_tunnel(self, settings, internal, tls):
        site, proxy = routing_by_host(settings, context=tls)
        try:
            answer = egress.post(f"https://{NAME}:{internal.port}/h", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert proxy.asked == [f"{PUBLIC}:{internal.port}"]
        # Whether a CONNECT carries Host depends on the Python version; never the name.
        assert proxy.hosts in ([None], [f"{PUBLIC}:{internal.port}"])
        assert (answer.status, site.seen) == (204, [("/h", f"{NAME}:{internal.port}")])

    @pytest.mark.django_db
    def test_a_delivery_through_it_never_reaches_loopback(self, settings, internal):
        site, proxy = routing_by_host(settings)
        try:
            outcome = webhook_delivery.post(f"http://{NAME}:{internal.port}/h", "{}", "whsec_x")
        finally:
            proxy.close()
            site.close()

        assert internal.connections == 0
        assert outcome[0] == 204 and len(site.seen) == 1


class TestACheckingProxyLikeSmokescreen:
    @pytest.mark.parametrize("scheme", ["http", "https"])
    def test_it_keeps_working_since_it_is_handed_a_public_address(
        self, settings, internal, tls, scheme
    ):
        site, proxy = through(settings, checking=True, context=tls if scheme == "https" else None)
        try:
            answer = egress.post(f"{scheme}://{NAME}:{internal.port}/h", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert (answer.status, proxy.refused, internal.connections) == (204, [], 0)
        host = NAME if scheme == "https" else PUBLIC  # inside the tunnel, the name
        assert site.seen == [("/h", f"{host}:{internal.port}")]

    def test_it_refuses_a_loopback_address_it_is_handed(self, settings, internal):
        """Its own guard works: with private URLs allowed here, it still says no."""
        site, proxy = through(settings, checking=True)
        settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
        try:
            answer = egress.post(f"http://127.0.0.1:{internal.port}/h", b"{}", {}, timeout=5)
        finally:
            proxy.close()
            site.close()

        assert (answer.status, internal.connections) == (407, 0)
        assert proxy.refused == [f"127.0.0.1:{internal.port}"]


def _eventually(condition, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()
