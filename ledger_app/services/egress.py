"""The one way out to a URL a client gave us: parsed once by urllib3's own parser, its host
resolved once, and the connection made to the very address that was checked."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import socket
import ssl
import sys
import threading
from dataclasses import dataclass
from typing import Any

import certifi
import urllib3
from django.conf import settings
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError, LocationParseError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util import parse_url
from urllib3.util.ssl_match_hostname import CertificateError

from ledger_app.text import has_control_characters

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
EXCERPT_BYTES = 64  # of a receiver's answer: enough to tell "not found" from a stack trace
CA_BUNDLE = certifi.where()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Percent-encoded delimiters (\ / @ # ? : % [ ]): a parser that decodes before it splits
# would see another host than the one checked, so none may appear anywhere in the URL.
ENCODED_DELIMITER = re.compile(r"%(5c|2f|40|23|3f|3a|25|5b|5d)", re.IGNORECASE)
LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# A last label that inet_aton (and browsers) would read as a number: 0x7f.1, 127.1, 2130706433.
NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
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


class Refused(Exception):
    """Not sent, and why, in words an operator can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NoAnswer(Exception):
    """Sent (or tried), and no HTTP answer came back."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Destination:
    """A URL as the connecting client reads it; nothing else is ever read from the URL."""

    scheme: str
    host: str  # lower case; an IPv6 literal without its brackets
    port: int
    target: str  # path and query, as sent on the request line
    ip_literal: IPAddress | None

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"


@dataclass(frozen=True)
class Answer:
    status: int
    excerpt: bytes  # at most EXCERPT_BYTES of the body, read only when the status is not 2xx


# --- the URL's form ----------------------------------------------------------------------


def destination(url: object) -> Destination:
    """The URL's scheme, host, port and target, or Refused when it is not a plain
    http(s) URL: userinfo, backslashes, fragments, encoded delimiters, non-ASCII and
    hosts that are neither a dotted IPv4 address, an IPv6 literal nor a DNS name."""
    if not isinstance(url, str) or not url:
        raise Refused("the URL must be a string")
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if has_control_characters(url) or any(ch.isspace() for ch in url):
        raise Refused("the URL must not contain spaces or control characters")
    if not url.isascii():
        raise Refused("the URL must be ASCII (an international host in its xn-- form)")
    for sign, what in (("\\", "a backslash"), ("@", "an @ (userinfo)"), ("#", "a fragment")):
        if sign in url:
            raise Refused(f"the URL must not contain {what}")
    encoded = ENCODED_DELIMITER.search(url)
    if encoded:
        raise Refused(f"the URL must not contain the encoded delimiter {encoded.group(0)}")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise Refused("the URL must start with http:// or https://")
    try:
        parts = parse_url(url)
    except LocationParseError:
        raise Refused("the URL cannot be parsed") from None
    if parts.auth is not None or parts.fragment is not None or not parts.host:
        raise Refused("the URL must have a host and nothing else before its path")
    # What urllib3 read as the authority must be every character up to the path: a parser
    # that splits anywhere else is not the one that connects.
    raw_authority = re.split(r"[/?]", rest, maxsplit=1)[0].lower()
    if raw_authority not in (parts.host, f"{parts.host}:{parts.port}"):
        raise Refused("the URL's host and port are not plain")
    scheme = scheme.lower()
    port = parts.port if parts.port is not None else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise Refused("the URL's port must be between 1 and 65535")
    host, literal = _plain_host(parts.host)
    return Destination(scheme, host, port, parts.request_uri, literal)


def _plain_host(host: str) -> tuple[str, IPAddress | None]:
    if host.startswith("["):
        try:
            return host[1:-1], ipaddress.IPv6Address(host[1:-1])
        except ValueError:  # a zone id (%eth0) or not an address
            raise Refused("the URL's IPv6 address is not plain") from None
    try:
        return host, ipaddress.IPv4Address(host)  # strict: four decimal parts, no zeros first
    except ValueError:
        pass
    if host.endswith("."):
        raise Refused("the URL's host must not end in a dot")
    labels = host.split(".")
    if len(host) > 253 or not all(LABEL.fullmatch(label) for label in labels):
        raise Refused("the URL's host must be a DNS name, a dotted IPv4 address or [IPv6]")
    if NUMERIC_LABEL.fullmatch(labels[-1]):
        raise Refused("the URL's host is a number but not a dotted IPv4 address")
    return host, None


# --- the address -------------------------------------------------------------------------


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
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            kind, inner = embedded
            if kind in ("IPv4-mapped", "IPv4-compatible"):
                return f"{kind} IPv6 (give the IPv4 address itself)"
            why = not_public(inner)
            if why:
                return f"{kind} IPv6 of a {why} address ({inner})"
        if address in SITE_LOCAL:
            return "site-local"
        if block is None and address not in GLOBAL_UNICAST:
            return "reserved (outside 2000::/3, the global unicast space)"
    if block is not None and block[0] is None:  # the registry says N/A: not reachable as such
        return f"{block[1]}, not globally reachable"
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


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
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


ALLOW_PRIVATE_HINT = "set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it"


def _refusal(address: IPAddress, own: frozenset[IPAddress]) -> str | None:
    why = not_public(address)
    if why is None and address in own:
        why = "one of this machine's own addresses"
    embedded = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if why is None and embedded is not None and embedded[1] in own:
        # 64:ff9b::<our public IPv4> leaves by the NAT64 gateway and comes back to us.
        why = f"{embedded[0]} IPv6 of one of this machine's own addresses ({embedded[1]})"
    if why is None:
        return None
    return f"address {address} is {why} ({ALLOW_PRIVATE_HINT})"


def address_for(place: Destination) -> str:
    """The address to connect to: the host resolved once, refused unless every address
    it has is public and none is this machine's own (or WEBHOOK_ALLOW_PRIVATE_URLS)."""
    try:
        found = socket.getaddrinfo(place.host, place.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise Refused(f"the host {place.host} could not be resolved") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]
    if not addresses:
        raise Refused(f"the host {place.host} could not be resolved")
    if settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        return str(addresses[0])
    own = own_addresses()  # asked afresh every time: an address added a second ago counts
    for address in addresses:
        refusal = _refusal(address, own)
        if refusal:
            shown = "" if place.ip_literal is not None else f" of {place.host}"
            raise Refused(refusal.replace(f"address {address}", f"address {address}{shown}", 1))
    return str(addresses[0])


def check(url: object) -> Destination:
    """The URL's destination when it may be sent to now, else Refused."""
    place = destination(url)
    address_for(place)
    return place


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
        raise Refused(f"this machine's own addresses could not be listed: {os.strerror(error)}")
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


# --- the request -------------------------------------------------------------------------


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST `body` to `url`: checked (form, then the address it resolves to, now), sent to
    that very address, directly or through WEBHOOK_PROXY_URL, no redirect followed, no
    retry. Refused when not sent; NoAnswer when no HTTP answer came back. `timeout` bounds
    each step and the whole request, however slowly the receiver answers (Deadline, below)."""
    place = destination(url)
    address = address_for(place)
    headers = {name: value for name, value in headers.items() if name.lower() != "host"}
    limits = urllib3.Timeout(total=timeout, connect=timeout, read=timeout)
    pool: urllib3.PoolManager | urllib3.HTTPConnectionPool
    if settings.WEBHOOK_PROXY_URL:
        pool, target, host = _proxied_pool(place, address, limits)
    else:
        pool, target, host = _pinned_pool(place, address, limits), place.target, place.authority
    headers["Host"] = host
    watched(pool)
    deadline = Deadline(timeout).start()
    try:
        response = pool.urlopen(
            "POST",
            target,
            body=body,
            headers=headers,
            redirect=False,
            retries=False,
            preload_content=False,
            assert_same_host=False,
        )
        try:
            excerpt = b"" if 200 <= response.status < 300 else _excerpt(response)
        finally:
            response.close()
        return Answer(response.status, excerpt)
    except NewConnectionError as exc:  # a subclass of the timeout, for old callers' sake
        raise NoAnswer(_why_no_answer(exc)) from None
    except Urllib3Timeout:
        raise NoAnswer(f"timed out after {timeout:g} s") from None
    except (HTTPError, OSError) as exc:
        if deadline.expired:  # its sockets were shut down: the receiver was too slow
            raise NoAnswer(f"timed out after {timeout:g} s") from None
        raise NoAnswer(_why_no_answer(exc)) from None
    finally:
        deadline.end()
        if isinstance(pool, urllib3.PoolManager):
            pool.clear()
        else:
            pool.close()


def _proxied_pool(
    place: Destination, address: str, limits: urllib3.Timeout
) -> tuple[urllib3.ProxyManager, str, str]:
    """The pool, the request target and the Host header to send through the proxy: to
    the checked address, never the name. https as `CONNECT <address>:<port>` (TLS inside
    the tunnel still sends and verifies the name, and the Host header inside it, which the
    proxy never sees, is the name); http as an absolute-form request to
    `http://<address>:<port>/...` with `Host: <address>:<port>` too, what an RFC 9112 proxy
    would send on anyway. The name is nowhere the proxy can read it, so a proxy that
    resolves what it is given, by the request line or by the Host header (nginx's
    `proxy_pass http://$http_host`), and forwards anything, reaches only that address."""
    tls: dict[str, Any] = {}
    if place.scheme == "https":
        tls = {"server_hostname": place.host, "assert_hostname": place.host}
    pool = urllib3.ProxyManager(
        settings.WEBHOOK_PROXY_URL,
        timeout=limits,
        retries=False,
        cert_reqs=ssl.CERT_REQUIRED,
        ca_certs=CA_BUNDLE,
        **tls,
    )
    checked = f"[{address}]" if ":" in address else address
    authority = f"{checked}:{place.port}"
    host = place.authority if place.scheme == "https" else authority
    return pool, f"{place.scheme}://{authority}{place.target}", host


def _pinned_pool(
    place: Destination, address: str, limits: urllib3.Timeout
) -> urllib3.HTTPConnectionPool:
    """A pool that connects to `address` only. TLS still names and verifies the host."""
    common: dict[str, Any] = {"timeout": limits, "retries": False, "maxsize": 1, "block": False}
    if place.scheme == "http":
        return urllib3.HTTPConnectionPool(address, place.port, **common)
    return urllib3.HTTPSConnectionPool(
        address,
        place.port,
        server_hostname=place.host,
        assert_hostname=place.host,
        cert_reqs=ssl.CERT_REQUIRED,
        ca_certs=CA_BUNDLE,
        **common,
    )


def _excerpt(response: urllib3.BaseHTTPResponse) -> bytes:
    try:
        return response.read(EXCERPT_BYTES) or b""
    except (HTTPError, OSError):
        return b""


def _why_no_answer(exc: BaseException) -> str:
    """A short reason naming the failure, not the internal details urllib3 adds."""
    causes = _causes(exc)
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate refused: {cause.verify_message}"[:200]
        if isinstance(cause, CertificateError):  # urllib3's own check of assert_hostname
            return f"TLS certificate refused: {cause}"[:200]
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed ({cause.reason or type(cause).__name__})"[:200]
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return f"could not connect: {cause.strerror.lower()}"[:200]
    return f"no answer ({type(exc).__name__})"


def _causes(exc: BaseException | None) -> list[BaseException]:
    """The exception and what it wraps: urllib3 chains some and holds others in args."""
    found: list[BaseException] = []
    while exc is not None and exc not in found:
        found.append(exc)
        wrapped = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None
        exc = exc.__cause__ or exc.__context__ or wrapped
    return found


def escaped(excerpt: bytes) -> str:
    """Bytes a receiver sent, as printable ASCII: anything else as \\xNN."""
    return "".join(
        chr(b) if 32 <= b < 127 and b != 0x5C else ("\\\\" if b == 0x5C else f"\\x{b:02x}")
        for b in excerpt
    )


# --- the whole-request deadline ----------------------------------------------------------
# urllib3's timeouts bound each socket operation, not the request: a receiver that sends its
# answer a byte at a time, each inside the read timeout, keeps a request open as long as it
# likes (and a webhook delivery past its lease, when another lane or worker sends it
# again). A timer shuts the request's sockets down once its time is up, which ends any read
# or write at once; post() then reports a timeout. The sockets are found as they are made:
# the pools post() uses make their connections with classes that hand each new socket
# (before any TLS handshake or CONNECT tunnel) to the Deadline running in that thread.

_current = threading.local()


class Deadline:
    """`seconds` from start() to end(); past it, every socket the request made is shut
    down and `expired` is true."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._ended = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> Deadline:
        _current.deadline = self
        self._timer.start()
        return self

    def end(self) -> None:
        """The request is over (its sockets are about to be closed): nothing is shut
        down after this."""
        with self._lock:
            self._ended = True
        self._timer.cancel()
        if getattr(_current, "deadline", None) is self:
            _current.deadline = None

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._ended:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)


class _Watched(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.watch(sock)
        return sock


class _WatchedHTTP(_Watched, HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTP


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPS


def watched(pool: urllib3.PoolManager | urllib3.HTTPConnectionPool) -> None:
    """Make `pool` open its connections (directly, or through a ProxyManager's pools, a
    CONNECT tunnel included) so that the current Deadline sees their sockets."""
    if isinstance(pool, urllib3.PoolManager):
        pool.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    elif isinstance(pool, urllib3.HTTPSConnectionPool):
        pool.ConnectionCls = _WatchedHTTPS
    else:
        pool.ConnectionCls = _WatchedHTTP
