"""Run inside a network namespace of its own by tests/webhooks/test_egress_namespace.py:
loopback receivers on ports 80 and 8790 (IPv4 and IPv6), then one `deliver_webhooks
--once` (or, with --raw URL..., a bare requests.post of each URL); prints as JSON what the
receivers got and what else this process could reach.

`--own ADDRESS` (repeatable, first) gives the namespace's machine that address on an
interface of its own that is not loopback (one end of a veth pair), with receivers on it
too. `--added-later ADDRESS` runs egress.check on the address's URL, adds the address to
that interface, and checks again."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import shutil
import socket
import subprocess
import sys
import threading

PORTS = (80, 8790)
OWN_INTERFACE = "own0"  # a veth pair's end; its peer is own1


class _IPv6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def add_own_address(address: str) -> None:
    """`address` on OWN_INTERFACE, a non-loopback interface of this machine."""
    ip = shutil.which("ip") or "ip"
    if subprocess.run([ip, "link", "show", OWN_INTERFACE], capture_output=True).returncode:
        subprocess.run(
            [ip, "link", "add", OWN_INTERFACE, "type", "veth", "peer", "name", "own1"], check=True
        )
        for name in ("own1", OWN_INTERFACE):
            subprocess.run([ip, "link", "set", name, "up"], check=True)
    prefix, nodad = ("128", ["nodad"]) if ":" in address else ("32", [])
    subprocess.run(
        [ip, "address", "add", f"{address}/{prefix}", "dev", OWN_INTERFACE, *nodad], check=True
    )


def receivers(hits: list[dict], own: tuple[str, ...] = ()) -> list[http.server.ThreadingHTTPServer]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            bound = self.server.server_address
            assert isinstance(bound, tuple)  # an IP socket's (host, port)
            hits.append(
                {
                    "address": bound[0],
                    "port": bound[1],
                    "path": self.path,
                    "host": self.headers.get("Host", ""),
                    "signature": self.headers.get("Stripe-Signature", ""),
                    "body": body.decode("utf-8", "replace"),
                }
            )
            self.send_response(200)
            self.send_header("Content-Length", "14")
            self.end_headers()
            self.wfile.write(b"internal reply")

        do_GET = do_POST  # http.server's name

        def log_message(self, format, *args):  # http.server's name
            pass

    servers = []
    for server_class, host in (
        (http.server.ThreadingHTTPServer, "127.0.0.1"),
        (_IPv6Server, "::1"),
        *((_IPv6Server if ":" in a else http.server.ThreadingHTTPServer, a) for a in own),
    ):
        for port in PORTS:
            server = server_class((host, port), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
    return servers


def reachable(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2):
            return True
    except OSError:
        return False


def main(argv: list[str]) -> None:
    own: list[str] = []
    while argv[:1] == ["--own"]:
        own.append(argv[1])
        add_own_address(argv[1])
        argv = argv[2:]
    hits: list[dict] = []
    receivers(hits, tuple(own))
    report: dict = {
        "reach": {
            "receiver": reachable(("127.0.0.1", 8790)),  # the harness itself works
            "postgres_over_tcp": reachable(("127.0.0.1", 5432)),
            "outside": reachable(("8.8.8.8", 53)),
        }
    }
    if argv[:1] == ["--raw"]:
        import requests

        for url in argv[1:]:
            with contextlib.suppress(requests.RequestException):
                requests.post(url, data=b"{}", timeout=5, allow_redirects=False)
    elif argv[:1] == ["--added-later"]:
        import django

        django.setup()
        from ledger_app.events import egress

        address = argv[1]
        url = f"http://[{address}]/hooks" if ":" in address else f"http://{address}/hooks"

        def outcome() -> str:
            try:
                egress.check(url)
            except egress.Refused as refused:
                return refused.reason
            return "allowed"

        before = outcome()
        add_own_address(address)
        report["checks"] = [before, outcome()]
    else:
        import django

        django.setup()
        from django.core.management import call_command

        out, err = io.StringIO(), io.StringIO()
        call_command("deliver_webhooks", "--once", stdout=out, stderr=err)
        report["output"] = out.getvalue() + err.getvalue()
    report["hits"] = hits
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
