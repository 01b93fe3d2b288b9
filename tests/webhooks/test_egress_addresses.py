"""Which addresses are public (issue 44, finding 5): the IANA special-purpose registries'
non-global blocks are refused whatever Python's `ipaddress` says (3.11 calls 192.0.0.8
global), their globally reachable ones are not, and this machine's own addresses, every
address of every interface, are refused at the check and at delivery."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import threading

import pytest

from ledger_app.events import delivery as webhook_delivery
from ledger_app.events import egress, egress_addresses
from tests.conftest import IN_CI

PUBLIC = "93.184.215.14"

# The first address of every block the IANA IPv4 and IPv6 special-purpose address
# registries mark as not globally reachable (or N/A), copied from the registries (2025-10),
# not from egress.SPECIAL_PURPOSE.
NOT_GLOBAL = [
    "0.0.0.0",  # noqa: S104 - "this network" 0.0.0.0/8, "this host" 0.0.0.0/32
    "10.0.0.0",
    "100.64.0.0",
    "127.0.0.0",
    "169.254.0.0",
    "172.16.0.0",
    "192.0.0.0",  # IETF protocol assignments /24, IPv4 service continuity /29
    "192.0.0.8",  # IPv4 dummy address: Python 3.11 calls it global
    "192.0.0.170",  # NAT64/DNS64 discovery
    "192.0.0.171",
    "192.0.2.0",
    "192.88.99.0",  # deprecated 6to4 relay anycast (N/A)
    "192.168.0.0",
    "198.18.0.0",
    "198.51.100.0",
    "203.0.113.0",
    "240.0.0.0",
    "255.255.255.255",
    "::1",
    "::",
    "::ffff:0:0",
    "64:ff9b:1::",
    "100::",
    "100:0:0:1::",  # dummy IPv6 prefix (RFC 9780)
    "2001::",  # IETF protocol assignments /23, Teredo /32 (N/A)
    "2001:2::",
    "2001:10::",  # deprecated ORCHID (N/A)
    "2001:db8::",
    "2002::",  # 6to4 (N/A)
    "3fff::",  # documentation (RFC 9637): Python 3.11 calls it global
    "5f00::",  # segment routing SIDs (RFC 9602)
    "fc00::",
    "fe80::",
]
# Globally reachable by the registries, and a plain public address of each family.
GLOBAL = [
    "192.0.0.9",
    "192.0.0.10",
    "192.31.196.0",
    "192.52.193.0",
    "192.175.48.0",
    PUBLIC,
    "64:ff9b::808:808",
    "2001:1::1",
    "2001:1::2",
    "2001:1::3",
    "2001:3::",
    "2001:4:112::",
    "2001:20::",
    "2001:30::",
    "2620:4f:8000::",
    "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
]


def url_of(address: str, port: int = 8790) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/hooks"


@pytest.fixture(autouse=True)
def _checked(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    settings.WEBHOOK_PROXY_URL = ""


class TestTheSpecialPurposeRegistries:
    @pytest.mark.parametrize("address", NOT_GLOBAL)
    def test_the_first_address_of_each_non_global_block_is_refused(self, address, no_connection):
        with pytest.raises(egress.Refused) as refused:
            egress.check(url_of(address))
        status, error = webhook_delivery.post(url_of(address), "{}", "whsec_test")

        assert refused.value.reason.startswith(f"address {ipaddress.ip_address(address)} is ")
        assert (status, error) == (None, f"refused: {refused.value.reason}")
        assert no_connection == []

    @pytest.mark.parametrize("address", GLOBAL)
    def test_globally_reachable_blocks_and_public_addresses_are_not(self, address, no_connection):
        egress.check(url_of(address))
        status, error = webhook_delivery.post(url_of(address), "{}", "whsec_test")

        assert (status, error) == (None, "could not connect: connection refused")
        assert [host for host, *_ in no_connection] == [address]

    def test_python_is_not_asked(self, monkeypatch):
        """192.0.0.8 is global to Python 3.11 and 192.0.0.9 is private to Python 3.12.3:
        the table decides either way."""
        monkeypatch.setattr(ipaddress.IPv4Address, "is_global", property(lambda self: True))
        monkeypatch.setattr(ipaddress.IPv4Address, "is_private", property(lambda self: True))

        assert egress_addresses.not_public(ipaddress.ip_address("192.0.0.8")) is not None
        assert egress_addresses.not_public(ipaddress.ip_address("192.0.0.9")) is None


def _ip_addresses() -> set[str]:
    """Every address `ip address` (iproute2) lists: a second opinion on own_addresses()."""
    ip = shutil.which("ip")
    if ip is None:
        if IN_CI:
            pytest.fail("CI=true and `ip` (iproute2) is not installed")
        pytest.skip("NOT PROVEN: `ip` (iproute2) is not installed")
    listed = json.loads(subprocess.run([ip, "-j", "address"], capture_output=True).stdout)
    return {
        str(ipaddress.ip_address(info["local"]))
        for interface in listed
        for info in interface.get("addr_info", [])
    }


class TestThisMachinesOwnAddresses:
    def test_own_addresses_are_every_address_of_every_interface(self):
        assert {str(a) for a in egress_addresses.own_addresses()} == _ip_addresses()

    def test_its_non_loopback_addresses_are_refused_at_check_and_delivery(self, monkeypatch):
        """With the registry table out of the way (every address public to it), a
        service bound to one of this machine's own addresses is still not reached."""
        monkeypatch.setattr(egress, "not_public", lambda address: None)
        own = [
            a
            for a in _ip_addresses()
            if not ipaddress.ip_address(a).is_loopback and not ipaddress.ip_address(a).is_link_local
        ]
        assert own, "this machine has no address but loopback and link-local"

        for address in own:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            with socket.socket(family) as service:
                service.bind((address, 0))
                service.listen(4)
                service.settimeout(0.2)
                url = url_of(address, service.getsockname()[1])

                with pytest.raises(egress.Refused) as refused:
                    egress.check(url)
                status, error = webhook_delivery.post(url, "{}", "whsec_test")

                assert refused.value.reason == (
                    f"address {address} is one of this machine's own addresses "
                    "(set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
                )
                assert (status, error) == (None, f"refused: {refused.value.reason}")
                with pytest.raises(TimeoutError):
                    service.accept()  # nothing connected

    def test_an_address_added_a_moment_ago_counts(self, monkeypatch):
        """The check asks own_addresses() every time; that it lists an address added to an
        interface a moment ago is proven in test_egress_namespace.py."""
        added: set = set()
        real = egress_addresses.own_addresses
        monkeypatch.setattr(egress, "own_addresses", lambda: real() | added)
        egress.check(url_of(PUBLIC))

        added.add(ipaddress.ip_address(PUBLIC))

        with pytest.raises(egress.Refused, match="one of this machine's own addresses"):
            egress.check(url_of(PUBLIC))

    def test_nat64_of_its_own_public_ipv4_is_refused(self, monkeypatch, no_connection):
        """64:ff9b::/96 is globally reachable, but 64:ff9b::<our IPv4> leaves by the NAT64
        gateway and comes back to this machine."""
        real = egress_addresses.own_addresses
        monkeypatch.setattr(
            egress, "own_addresses", lambda: real() | {ipaddress.ip_address(PUBLIC)}
        )
        url = url_of(f"64:ff9b::{PUBLIC}")
        egress.check(url_of("64:ff9b::808:808"))  # another IPv4 behind NAT64 is fine

        with pytest.raises(egress.Refused) as refused:
            egress.check(url)
        status, error = webhook_delivery.post(url, "{}", "whsec_test")

        assert refused.value.reason == (
            f"address 64:ff9b::5db8:d70e is NAT64 IPv6 of one of this machine's own addresses "
            f"({PUBLIC}) (set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
        )
        assert (status, error) == (None, f"refused: {refused.value.reason}")
        assert no_connection == []

    @pytest.mark.parametrize(
        "embedding", ["IPv4-mapped", "IPv4-compatible", "NAT64", "6to4", "Teredo"]
    )
    def test_every_ipv6_form_carrying_its_own_ipv4_is_refused(
        self, monkeypatch, no_connection, embedding
    ):
        """With the registry table out of the way (every address public to it), each of
        this machine's own IPv4 addresses, carried in any IPv6 form, is still refused."""
        monkeypatch.setattr(egress, "not_public", lambda address: None)
        own = [a for a in _ip_addresses() if ipaddress.ip_address(a).version == 4]
        assert own, "this machine has no IPv4 address"

        for address in own:
            carried = _carrying(embedding, ipaddress.IPv4Address(address))
            with pytest.raises(egress.Refused) as refused:
                egress.check(url_of(str(carried)))
            status, error = webhook_delivery.post(url_of(str(carried)), "{}", "whsec_test")

            assert refused.value.reason == (
                f"address {carried} is {embedding} IPv6 of one of this machine's own addresses "
                f"({address}) (set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it)"
            )
            assert (status, error) == (None, f"refused: {refused.value.reason}")
        assert no_connection == []

    def test_listing_them_is_safe_from_many_threads(self):
        results: list = []
        threads = [
            threading.Thread(target=lambda: results.append(egress_addresses.own_addresses()))
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert len(results) == 8 and len(set(results)) == 1


def _carrying(embedding: str, ipv4: ipaddress.IPv4Address) -> ipaddress.IPv6Address:
    """`ipv4` inside an IPv6 address of the given form (RFC 4291, 6052, 3056, 4380)."""
    v4 = int(ipv4)
    teredo_server = int(ipaddress.IPv4Address("65.54.227.120"))
    value = {
        "IPv4-mapped": 0xFFFF << 32 | v4,
        "IPv4-compatible": v4,
        "NAT64": 0x64FF9B << 96 | v4,
        "6to4": 0x2002 << 112 | v4 << 80 | 1,
        "Teredo": 0x20010000 << 96 | teredo_server << 64 | (~v4 & 0xFFFFFFFF),
    }[embedding]
    return ipaddress.IPv6Address(value)
