"""Which addresses a webhook delivery may reach, for ledger_app/events/egress.py: the IANA
special-purpose registries' table (never Python's idea of global, which changes between
releases) and this machine's own addresses. No connection is made here."""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import sys

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Deprecated IPv6 site-local space (RFC 3879): Python calls it global, some networks route it.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")  # all IANA gives out; the rest is reserved

# The IANA special-purpose address registries, IPv4 and IPv6 (RFC 6890; as of 2025-10),
# every block with its "Globally Reachable" column: False, True, or None where the registry
# says N/A. The most specific block holding an address decides; only True lets it through.
# Ours, not Python's: ipaddress changes between releases (3.11 calls 192.0.0.8 global).
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
SPECIAL_PURPOSE: tuple[tuple[IPNetwork, bool | None, str], ...] = tuple(
    (ipaddress.ip_network(block), reachable, name)
    for block, reachable, name in (
        ("0.0.0.0/8", False, "'this network'"),
        ("0.0.0.0/32", False, "unspecified"),
        ("10.0.0.0/8", False, "private"),
        ("100.64.0.0/10", False, "shared address space (carrier-grade NAT)"),
        ("127.0.0.0/8", False, "loopback"),
        ("169.254.0.0/16", False, "link-local"),
        ("172.16.0.0/12", False, "private"),
        ("192.0.0.0/24", False, "IETF protocol assignments"),
        ("192.0.0.0/29", False, "IPv4 service continuity (DS-Lite)"),
        ("192.0.0.8/32", False, "the IPv4 dummy address"),
        ("192.0.0.9/32", True, "Port Control Protocol anycast"),
        ("192.0.0.10/32", True, "TURN anycast"),
        ("192.0.0.170/31", False, "NAT64/DNS64 discovery"),
        ("192.0.2.0/24", False, "documentation (TEST-NET-1)"),
        ("192.31.196.0/24", True, "AS112"),
        ("192.52.193.0/24", True, "AMT"),
        ("192.88.99.0/24", None, "deprecated 6to4 relay anycast"),
        ("192.168.0.0/16", False, "private"),
        ("192.175.48.0/24", True, "AS112 direct delegation"),
        ("198.18.0.0/15", False, "benchmarking"),
        ("198.51.100.0/24", False, "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", False, "documentation (TEST-NET-3)"),
        ("240.0.0.0/4", False, "reserved"),
        ("255.255.255.255/32", False, "limited broadcast"),
        ("::1/128", False, "loopback"),
        ("::/128", False, "unspecified"),
        ("::ffff:0:0/96", False, "IPv4-mapped IPv6 (give the IPv4 address itself)"),
        ("64:ff9b::/96", True, "NAT64"),
        ("64:ff9b:1::/48", False, "local-use NAT64"),
        ("100::/64", False, "discard-only"),
        ("100:0:0:1::/64", False, "the IPv6 dummy prefix"),
        ("2001::/23", False, "IETF protocol assignments"),
        ("2001::/32", None, "Teredo"),
        ("2001:1::1/128", True, "Port Control Protocol anycast"),
        ("2001:1::2/128", True, "TURN anycast"),
        ("2001:1::3/128", True, "DNS-SD service registration anycast"),
        ("2001:2::/48", False, "benchmarking"),
        ("2001:3::/32", True, "AMT"),
        ("2001:4:112::/48", True, "AS112"),
        ("2001:10::/28", None, "deprecated ORCHID"),
        ("2001:20::/28", True, "ORCHIDv2"),
        ("2001:30::/28", True, "drone remote ID entity tags"),
        ("2001:db8::/32", False, "documentation"),
        ("2002::/16", None, "6to4"),
        ("2620:4f:8000::/48", True, "AS112 direct delegation"),
        ("3fff::/20", False, "documentation"),
        ("5f00::/16", False, "segment routing SIDs"),
        ("fc00::/7", False, "unique-local (private)"),
        ("fe80::/10", False, "link-local"),
    )
)


def not_public(address: IPAddress) -> str | None:
    """What kind of non-public address this is, or None when it is public, judged by
    SPECIAL_PURPOSE (never by Python's `ipaddress`, whose idea of global changes between
    releases). IPv6 forms that carry an IPv4 address (compatible, NAT64, 6to4, Teredo) are
    judged by it too."""
    if address in METADATA:
        return "link-local (cloud metadata)"
    block = special_purpose(address)
    if block is not None and block[0] is False:
        return block[1]
    if address.is_multicast:  # 224.0.0.0/4 and ff00::/8 have registries of their own
        return "multicast"
    if isinstance(address, ipaddress.IPv6Address):
        why = _not_public_ipv6(address, listed=block is not None)
        if why:
            return why
    if block is not None and block[0] is None:  # the registry says N/A: not reachable as such
        return f"{block[1]}, not globally reachable"
    return None


def _not_public_ipv6(address: ipaddress.IPv6Address, *, listed: bool) -> str | None:
    """What only an IPv6 address can be: a carrier of a non-public IPv4 address,
    site-local, or outside the global unicast space (when no SPECIAL_PURPOSE block,
    `listed`, holds it)."""
    embedded = embedded_ipv4(address)
    if embedded is not None:
        kind, inner = embedded
        if kind in ("IPv4-mapped", "IPv4-compatible"):
            return f"{kind} IPv6 (give the IPv4 address itself)"
        why = not_public(inner)
        if why:
            return f"{kind} IPv6 of a {why} address ({inner})"
    if address in SITE_LOCAL:
        return "site-local"
    if not listed and address not in GLOBAL_UNICAST:
        return "reserved (outside 2000::/3, the global unicast space)"
    return None


def special_purpose(address: IPAddress) -> tuple[bool | None, str] | None:
    """(globally reachable, name) of the most specific SPECIAL_PURPOSE block holding
    `address`, or None when none does."""
    found = [
        (network.prefixlen, reachable, name)
        for network, reachable, name in SPECIAL_PURPOSE
        if network.version == address.version and address in network
    ]
    if not found:
        return None
    _, reachable, name = max(found, key=lambda row: row[0])
    return reachable, name


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if int(address) >> 32 == 0:  # ::a.b.c.d (:: and ::1 were judged above)
        return "IPv4-compatible", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in NAT64):
        return "NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    if address.teredo is not None:
        return "Teredo", address.teredo[1]
    return None


# --- this machine's own addresses ---------------------------------------------------------


class _IfAddrs(ctypes.Structure):
    """struct ifaddrs (getifaddrs(3)): the same leading fields on Linux and the BSDs."""


_IfAddrs._fields_ = [
    ("ifa_next", ctypes.POINTER(_IfAddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.c_void_p),
]
# Where each family keeps its address in a struct sockaddr_in / sockaddr_in6, and its length.
_ADDRESS_AT: dict[int, tuple[int, int]] = {socket.AF_INET: (4, 4), socket.AF_INET6: (8, 16)}


def own_addresses() -> frozenset[IPAddress]:
    """Every address of every interface of this machine (IPv4 and IPv6, up or down), from
    getifaddrs(3) at the moment of asking: no cache, so an address added a second ago
    counts. A service bound to one of them is this machine's, whatever the address is."""
    libc = ctypes.CDLL(None, use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        error = ctypes.get_errno()
        raise OSError(
            error, f"this machine's own addresses could not be listed: {os.strerror(error)}"
        )
    found: set[IPAddress] = set()
    try:
        entry = head
        while entry:
            sockaddr = entry.contents.ifa_addr
            if sockaddr:
                family = (
                    ctypes.c_ushort.from_address(sockaddr).value
                    if sys.platform.startswith("linux")
                    else ctypes.c_ubyte.from_address(sockaddr + 1).value  # BSD: sa_len first
                )
                if family in _ADDRESS_AT:
                    offset, size = _ADDRESS_AT[family]
                    found.add(ipaddress.ip_address(ctypes.string_at(sockaddr + offset, size)))
            entry = entry.contents.ifa_next
    finally:
        libc.freeifaddrs(head)
    return frozenset(found)
