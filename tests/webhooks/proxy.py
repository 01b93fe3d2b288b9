"""Test doubles for the egress proxy tests (tests/webhooks/test_egress_proxy.py): a forward
proxy in a thread that resolves whatever host it is handed through a resolver the test
controls, a loopback listener that counts every connection it is reached by, and a small
HTTP(S) site standing in for a public host."""

from __future__ import annotations

import http.server
import ipaddress
import select
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit


class Listener:
    """A TCP port on 127.0.0.1 (an internal service): counts the connections it accepts."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                accepted, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            accepted.close()

    def close(self) -> None:
        self.socket.close()


class Site:
    """An HTTP(S) server on 127.0.0.1 standing in for a public host: records (path, Host)
    of every POST and answers 204."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                site.seen.append((self.path, self.headers["Host"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def self_signed(directory: Path, name: str) -> tuple[Path, ssl.SSLContext]:
    """A certificate for `name` only (its own CA bundle) and a server context serving it."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}"]
        + ["-addext", f"subjectAltName=DNS:{name}"],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return cert, context


def _host_and_port(authority: str, default: int | None = None) -> tuple[str, int]:
    """("name", 8080) of "name:8080", ("::1", 80) of "[::1]:80"; with a `default`, a Host
    header's authority may leave the port out ("name", "[::1]")."""
    if default is not None and (authority.endswith("]") or ":" not in authority):
        return authority.strip("[]"), default
    host, _, port = authority.rpartition(":")
    return host.strip("[]"), int(port)


class Proxy:
    """A forward proxy on 127.0.0.1 in a thread: `CONNECT host:port` tunnels and
    absolute-form requests (`POST http://host:port/path`), as generic proxies take them.

    It resolves whatever host it is handed with `resolve` (name -> address; an address
    stands for itself). With `checking=False` it forwards anything, as a proxy that does
    not check addresses does; with `checking=True` it refuses, as Smokescreen does by
    default, any address that is not global (by Python's own judgement, not ours).
    `internet` maps a public address to the loopback port of the Site standing in for it:
    the test proxy never leaves this machine, and reaches a non-loopback address only
    that way.

    With `by_host=True` it goes where the `Host` header says, not where the request line
    or the CONNECT target says (when a CONNECT carries one), as the common nginx forward
    proxy does (`proxy_pass http://$http_host$request_uri`)."""

    def __init__(
        self,
        resolve: Callable[[str], str],
        internet: dict[str, int],
        checking: bool = False,
        by_host: bool = False,
    ) -> None:
        self.resolve = resolve
        self.internet = internet
        self.checking = checking
        self.by_host = by_host
        self.asked: list[str] = []  # the host:port of every CONNECT or absolute-form request
        self.hosts: list[str | None] = []  # the Host header of each, None when it had none
        self.refused: list[str] = []
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def dial(self, host: str, port: int) -> socket.socket | str:
        """A connection to where `host` resolves, or why not (a status line's reason)."""
        address = self.resolve(host)
        if self.checking and not ipaddress.ip_address(address).is_global:
            self.refused.append(f"{host}:{port}")
            return "Request Rejected by Proxy"
        if address in self.internet:
            return socket.create_connection(("127.0.0.1", self.internet[address]), timeout=5)
        if ipaddress.ip_address(address).is_loopback:
            return socket.create_connection((address, port), timeout=5)
        return "Bad Gateway (the test proxy does not leave this machine)"

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_CONNECT(self):  # http.server's name
                proxy.asked.append(self.path)
                proxy.hosts.append(self.headers["Host"])
                host, port = _host_and_port(self.path)
                if proxy.by_host and self.headers["Host"]:
                    host, port = _host_and_port(self.headers["Host"], port)
                upstream = proxy.dial(host, port)
                if isinstance(upstream, str):
                    self.send_error(407 if proxy.checking else 502, upstream)
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                _pipe(self.connection, upstream)
                self.close_connection = True

            def do_POST(self):  # http.server's name
                parts = urlsplit(self.path)
                proxy.asked.append(parts.netloc)
                proxy.hosts.append(self.headers["Host"])
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                host, port = parts.hostname or "", parts.port or 80
                if proxy.by_host:
                    host, port = _host_and_port(self.headers["Host"] or "", 80)
                upstream = proxy.dial(host, port)
                if isinstance(upstream, str):
                    self.send_error(407 if proxy.checking else 502, upstream)
                    return
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                head = [f"POST {target} HTTP/1.1"] + [
                    f"{name}: {value}"
                    for name, value in self.headers.items()
                    if name.lower() not in ("connection", "proxy-connection")
                ]
                with upstream:
                    upstream.sendall("\r\n".join([*head, "Connection: close", "", ""]).encode())
                    upstream.sendall(body)
                    while chunk := upstream.recv(65536):
                        self.wfile.write(chunk)
                self.close_connection = True

            def log_message(self, *args):
                pass

        return Handler


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes."""
    with upstream:
        while True:
            readable, _, _ = select.select([client, upstream], [], [], 10)
            if not readable:
                return
            for side in readable:
                data = side.recv(65536)
                if not data:
                    return
                (upstream if side is client else client).sendall(data)
