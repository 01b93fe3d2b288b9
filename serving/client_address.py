"""The client's address: the one place that reads it, for the admin lockout, the API's
failed-authentication limit and the logs (docs/operating/rate-limits.md); and what the
lockout and the limits count a client by (`counted_address`)."""

from __future__ import annotations

import ipaddress

from django.conf import settings

# No real client has it: what a request whose address cannot be read is counted and logged
# under. Still an IP address, so django-axes can store it (an `inet` column on PostgreSQL).
UNKNOWN_ADDRESS = "0.0.0.0"  # noqa: S104 - a value to count by, nothing binds to it


def client_address(request) -> str:
    """The address the client connected from, as a canonical IP string.

    Behind TRUSTED_PROXY_COUNT proxies that each append the address they received the
    request from to X-Forwarded-For, it is the entry that many places from the right: the
    one the outermost trusted proxy wrote. Entries to its left are whatever the client sent
    and are never read, so a forged header cannot change the answer. A request with fewer
    entries, or with something that is not an IP address there, did not come through the
    proxies as configured: it gets the connection's own address (REMOTE_ADDR), which nobody
    can forge, and UNKNOWN_ADDRESS when that is not an IP address either (a Unix socket).
    Repeated X-Forwarded-For headers arrive joined with commas (gunicorn, Django's test
    client), in the order they were sent, so the proxy's appended entry is still last.
    """
    proxies = settings.TRUSTED_PROXY_COUNT
    meta = request.META
    if proxies:
        # At most proxies + 1 pieces: the work is bounded whatever the client sent.
        entries = str(meta.get("HTTP_X_FORWARDED_FOR", "")).rsplit(",", proxies)
        if len(entries) >= proxies:
            address = _parse(entries[-proxies])
            if address is not None:
                return address
    return _parse(str(meta.get("REMOTE_ADDR", ""))) or UNKNOWN_ADDRESS


def counted_address(request) -> str:
    """What the admin lockout and the API's limits count the client by: its address
    (`client_address`), except that an IPv6 client is counted by its whole network of
    CLIENT_IPV6_PREFIX_LENGTH bits (64: one LAN, what a provider hands one customer), written
    as the network's first address. One host gets a whole /64, and its operating system
    picks a new address in it whenever asked, so counting each address alone would let it
    try without end. IPv4 addresses (IPv4-mapped IPv6 ones included) count alone. Still one
    IP address, so django-axes can store it and `axes_reset_ip` can name it."""
    return network_of(client_address(request))


def network_of(address: str) -> str:
    """An address as `counted_address` counts it (`2001:db8:1:2:a:b:c:d` ->
    `2001:db8:1:2::` with a /64); an IPv4 address, or anything that is not an address,
    as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        prefix = settings.CLIENT_IPV6_PREFIX_LENGTH
        return str(ipaddress.IPv6Network((ip, prefix), strict=False).network_address)
    return address


def _parse(entry: str) -> str | None:
    """The IP address in one entry (`198.51.100.7`, `2001:db8::1`, with a port or IPv6
    brackets as some proxies write them), canonical, or None."""
    host = entry.strip()
    if host.startswith("["):
        host, closed, rest = host[1:].partition("]")
        if not closed or (rest and not (rest.startswith(":") and _is_port(rest[1:]))):
            return None
    elif host.count(":") == 1:
        host, _, port = host.partition(":")
        if not _is_port(port):
            return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # a dual-stack socket's view of an IPv4 client
            return str(address.ipv4_mapped)
        if address.scope_id is not None:  # the zone names our interface, not the client
            return str(ipaddress.IPv6Address(host.partition("%")[0]))
    return str(address)


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and int(text) <= 65535
