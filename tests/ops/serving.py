"""Serving as shipped, for the serving tests: gunicorn with nothing but gunicorn.conf.py
(and what `make run` adds), Debian's nginx with deploy/nginx/backoffice.conf, and clients
that send their requests a little at a time (slowloris)."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.processes import ROOT, ServerProcess, free_loopback_port, gunicorn_env

NGINX_CONF = ROOT / "deploy" / "nginx" / "backoffice.conf"


class ShippedGunicorn(ServerProcess):
    """`gunicorn -c gunicorn.conf.py backoffice.wsgi` and `args`, in production mode against
    the test database, on `port` (a free one unless given), in a process group of its own:
    every setting not in `env` (GUNICORN_BIND, WEB_CONCURRENCY, GUNICORN_THREADS) is the
    shipped file's, graceful_timeout included."""

    name = "gunicorn"

    def __init__(
        self, log_path: Path, *args: str, workers: int, threads: int, port: int = 0, **env: str
    ) -> None:
        self.port = port or free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(log_path)
        environment = gunicorn_env(self.port, workers, threads, **env)
        environment.pop("GUNICORN_CMD_ARGS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "backoffice.wsgi", *args],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_answering(f"{self.url}/v1/charges", 401, timeout)

    def group(self) -> set[int]:
        """The live processes of its process group: the master and its workers, and the
        workers still there after the master is gone."""
        return process_group(self.process.pid)

    def stop(self) -> None:
        """SIGKILL to what is left of the group, master and workers (also orphans)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(10)
        if not self._log.closed:
            self._log.close()


def process_group(pgid: int) -> set[int]:
    """The live (not zombie) processes whose process group is `pgid`, from /proc."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.add(int(entry.name))
    return members


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and its key, written to `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "fullchain.pem", directory / "privkey.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def substitute(text: str, pattern: str, replacement: str, count: int) -> str:
    """`pattern` replaced, and it must occur exactly `count` times: a shipped file that has
    changed shape fails here rather than being served half-substituted."""
    replaced, found = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert found == count, f"{NGINX_CONF.name}: {pattern!r} found {found} times, not {count}"
    return replaced


def served_nginx_conf(
    *, http_port: int, https_port: int, upstream_port: int, cert: Path, key: Path, access_log: Path
) -> str:
    """deploy/nginx/backoffice.conf with only its listen ports (loopback, IPv4), upstream
    and certificate placeholders and its access log's path (kept in its format) replaced."""
    text = NGINX_CONF.read_text()
    text = substitute(text, r"^(\s*access_log )\S+( backoffice;)", rf"\g<1>{access_log}\2", 2)
    text = substitute(text, r"^(\s*)listen \[::\]:\d+( ssl)?;\n", "", 2)
    text = substitute(text, r"^(\s*)listen 80;", rf"\1listen 127.0.0.1:{http_port};", 1)
    text = substitute(text, r"^(\s*)listen 443 ssl;", rf"\1listen 127.0.0.1:{https_port} ssl;", 1)
    text = substitute(
        text, r"^(\s*)server 127\.0\.0\.1:8000;", rf"\1server 127.0.0.1:{upstream_port};", 1
    )
    text = substitute(text, r"^(\s*ssl_certificate\s+)\S+;", rf"\g<1>{cert};", 1)
    return substitute(text, r"^(\s*ssl_certificate_key\s+)\S+;", rf"\g<1>{key};", 1)


class Nginx(ServerProcess):
    """Debian's nginx, in the foreground, as a non-root process (nobody, when the tests run
    as root), with its own prefix under /tmp: a wrapping nginx.conf whose http{} includes
    the shipped file (served_nginx_conf). Plain HTTP on `http_port`, TLS on `https_port`."""

    name = "nginx"

    def __init__(self, binary: str, upstream_port: int) -> None:
        # Not under pytest's tmp_path: nobody may not enter it.
        self.prefix = Path(tempfile.mkdtemp(prefix="nginx-serving-"))
        self.prefix.chmod(0o755)
        nobody = 65534 if os.geteuid() == 0 else None  # its user and group ids, run as root
        if nobody is not None:
            os.chown(self.prefix, 65534, 65534)  # its temporary directories go here
        super().__init__(self.prefix / "nginx.stderr")
        self.http_port, self.https_port = free_loopback_port(), free_loopback_port()
        self.url = f"https://127.0.0.1:{self.https_port}"
        # The shipped file's access log, in its own format, written here.
        self.access_log = self.prefix / "access.log"
        cert, key = self_signed_certificate(self.prefix)
        (self.prefix / "backoffice.conf").write_text(
            served_nginx_conf(
                http_port=self.http_port,
                https_port=self.https_port,
                upstream_port=upstream_port,
                cert=cert,
                key=key,
                access_log=self.access_log,
            )
        )
        temp_paths = "\n".join(
            f"    {kind}_temp_path {self.prefix}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (self.prefix / "nginx.conf").write_text(
            f"worker_processes 1;\n"
            f"pid {self.prefix}/nginx.pid;\n"
            f"error_log stderr warn;\n"
            f"events {{ worker_connections 1024; }}\n"
            f"http {{\n"
            f"{temp_paths}\n"
            f"    include {self.prefix}/backoffice.conf;\n"
            f"}}\n"
        )
        for path in self.prefix.iterdir():
            path.chmod(0o644)  # nobody reads them (the key is a throwaway)
        self.process = subprocess.Popen(
            [binary, "-p", f"{self.prefix}/", "-c", f"{self.prefix}/nginx.conf"]
            + ["-e", "stderr", "-g", "daemon off;"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
            user=nobody,
            group=nobody,
        )

    def wait_ready(self, timeout: float = 20) -> None:
        """Until both its ports take connections; its output if it exits first or never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"nginx exited early:\n{self.log()}")
            try:
                for port in (self.http_port, self.https_port):
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"nginx did not listen in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.prefix, ignore_errors=True)


class SlowClients:
    """`count` connections to host:port (over TLS when `tls`) that each send the start of a
    request and then one more header line every `pause` seconds, never the end: slowloris.
    A thread of its own trickles; a connection the server closes is counted as closed."""

    def __init__(
        self, port: int, count: int, *, tls: bool = False, pause: float = 1.0, host="127.0.0.1"
    ):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.sockets: list[socket.socket] = []
        self.closed = 0
        self.pause = pause
        self._stop = threading.Event()
        for _ in range(count):
            sock = socket.create_connection((host, port), timeout=10)
            if tls:
                sock = context.wrap_socket(sock, server_hostname=host)
            sock.sendall(f"GET /v1/charges HTTP/1.1\r\nHost: {host}\r\n".encode())
            self.sockets.append(sock)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        line = 0
        while not self._stop.wait(self.pause):
            line += 1
            for sock in list(self.sockets):
                try:
                    sock.sendall(f"X-Slow-{line}: a\r\n".encode())
                except OSError:
                    self.sockets.remove(sock)
                    self.closed += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


def seconds_to_answer(url: str, timeout: float, **kwargs) -> tuple[float, int | str]:
    """(seconds, status) of a GET of `url`, or (timeout, the error) when there is none."""
    import requests

    began = time.monotonic()
    try:
        response = requests.get(url, timeout=timeout, verify=False, **kwargs)  # noqa: S501
    except requests.RequestException as exc:
        return timeout, type(exc).__name__
    return time.monotonic() - began, response.status_code
