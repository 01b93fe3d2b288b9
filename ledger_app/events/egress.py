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

from ledger_app.events.egress_addresses import (
    IPAddress,
    embedded_ipv4,
    not_public,
    own_addresses,
)
from ledger_app.events.egress_deadline import Deadline, watched
from ledger_app.text import has_control_characters

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
EXCERPT_BYTES = 64  # of a receiver's answer: enough to tell "not found" from a stack trace
CA_BUNDLE = certifi.where()


# Percent-encoded delimiters (\ / @ # ? : % [ ]): a parser that decodes before it splits
# would see another host than the one checked, so none may appear anywhere in the URL.
ENCODED_DELIMITER = re.compile(r"%(5c|2f|40|23|3f|3a|25|5b|5d)", re.IGNORECASE)
LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# A last label that inet_aton (and browsers) would read as a number: 0x7f.1, 127.1, 2130706433.
NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")


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
    _refuse_odd_characters(url)
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


def _refuse_odd_characters(url: str) -> None:
    """Refused when the URL is too long or holds a character no plain URL needs."""
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


ALLOW_PRIVATE_HINT = "set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it"


def _refusal(address: IPAddress, own: frozenset[IPAddress]) -> str | None:
    why = not_public(address)
    if why is None and address in own:
        why = "one of this machine's own addresses"
    embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
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
    try:  # asked afresh every time: an address added a second ago counts
        own = own_addresses()
    except OSError as exc:  # not knowing them refuses, never lets through
        raise Refused(exc.strerror or str(exc)) from None
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


# --- the request -------------------------------------------------------------------------


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST `body` to `url`: checked (form, then the address it resolves to, now), sent to
    that very address, directly or through WEBHOOK_PROXY_URL, no redirect followed, no
    retry. Refused when not sent; NoAnswer when no HTTP answer came back. `timeout` bounds
    each step and the whole request, however slowly the receiver answers
    (egress_deadline.Deadline)."""
    place = destination(url)
    address = address_for(place)
    headers = {name: value for name, value in headers.items() if name.lower() != "host"}
    limits = urllib3.Timeout(total=timeout, connect=timeout, read=timeout)
    pool, target, host = _pool_for(place, address, limits)
    headers["Host"] = host
    watched(pool)
    deadline = Deadline(timeout).start()
    try:
        return _post_once(pool, target, body, headers)
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


Pool = urllib3.PoolManager | urllib3.HTTPConnectionPool


def _pool_for(place: Destination, address: str, limits: urllib3.Timeout) -> tuple[Pool, str, str]:
    """The pool, the request target and the Host header: through WEBHOOK_PROXY_URL when
    it is set, else straight to the checked address."""
    if settings.WEBHOOK_PROXY_URL:
        return _proxied_pool(place, address, limits)
    return _pinned_pool(place, address, limits), place.target, place.authority


def _post_once(pool: Pool, target: str, body: bytes, headers: dict[str, str]) -> Answer:
    """One POST, its answer's status and (when not 2xx) the first bytes of its body."""
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
