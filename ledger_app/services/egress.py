"""The one way out to a URL a client gave us: parsed once by urllib3's own parser, its host
resolved once, and the connection made to the very address that was checked."""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import certifi
import urllib3
from django.conf import settings
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
SHARED_SPACE = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, RFC 6598
# Deprecated IPv6 site-local space (RFC 3879): Python calls it global, some networks route it.
SITE_LOCAL = ipaddress.ip_network("fec0::/10")
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


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
    """What kind of non-public address this is, or None when it is public. IPv6 forms
    that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) are judged by it."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address in METADATA:
        return "link-local (cloud metadata)"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
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
    if address in SHARED_SPACE:
        return "shared address space (carrier-grade NAT)"
    if address in SITE_LOCAL:
        return "site-local"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "not globally routable"
    return None


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


def _refusal(address: IPAddress) -> str | None:
    why = not_public(address)
    if why is None or settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        return None
    return f"address {address} is {why} ({ALLOW_PRIVATE_HINT})"


def address_for(place: Destination) -> str:
    """The address to connect to: the host resolved once, refused unless every address
    it has is public (or WEBHOOK_ALLOW_PRIVATE_URLS)."""
    try:
        found = socket.getaddrinfo(place.host, place.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise Refused(f"the host {place.host} could not be resolved") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]
    if not addresses:
        raise Refused(f"the host {place.host} could not be resolved")
    for address in addresses:
        refusal = _refusal(address)
        if refusal:
            shown = "" if place.ip_literal is not None else f" of {place.host}"
            raise Refused(refusal.replace(f"address {address}", f"address {address}{shown}", 1))
    return str(addresses[0])


def check(url: object) -> Destination:
    """The URL's destination when it may be sent to now, else Refused."""
    place = destination(url)
    _judged(place)
    return place


def _judged(place: Destination) -> str | None:
    """The address to connect to, or None to go through WEBHOOK_PROXY_URL. Through the
    proxy, a name that resolves here is judged here too (a proxy that forwards anything
    must not make `localhost` reachable); one that does not resolve here is the proxy's to
    resolve and judge."""
    if not settings.WEBHOOK_PROXY_URL:
        return address_for(place)
    try:
        address_for(place)
    except Refused as refused:
        if not refused.reason.endswith("could not be resolved"):
            raise
    return None


# --- the request -------------------------------------------------------------------------


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST `body` to `url`: checked (form, then the address it resolves to, now), sent to
    that address or through WEBHOOK_PROXY_URL, no redirect followed, no retry. Refused
    when not sent; NoAnswer when no HTTP answer came back."""
    place = destination(url)
    address = _judged(place)
    headers = {**headers, "Host": place.authority}
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    if address is None:
        pool: urllib3.PoolManager | urllib3.HTTPConnectionPool = urllib3.ProxyManager(
            settings.WEBHOOK_PROXY_URL,
            timeout=limits,
            retries=False,
            cert_reqs=ssl.CERT_REQUIRED,
            ca_certs=CA_BUNDLE,
        )
        target = place.url
    else:
        pool = _pinned_pool(place, address, limits)
        target = place.target
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
        raise NoAnswer(_why_no_answer(exc)) from None
    finally:
        if isinstance(pool, urllib3.PoolManager):
            pool.clear()
        else:
            pool.close()


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
