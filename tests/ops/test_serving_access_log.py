"""No API key in gunicorn's access log (issue 44, finding 11). `make run` turns the access log
on; a client sending its key the way `curl -u sk_...:` does put it in the HTTP Basic user
name, which gunicorn's default format writes. Served with the shipped gunicorn.conf.py and
make run's `--access-logfile`, a key sent every way a client might (Basic user, Bearer,
even in the query string, right or wrong) leaves no part of itself in the log."""

from __future__ import annotations

import base64
import socket
import time
from urllib.parse import quote

import pytest
import requests

from ledger_app.access.api_keys import create_api_key
from tests.ops.serving import ShippedGunicorn

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PIECE = 8  # no 8 characters in a row of a key appear in the log


def pieces(secret: str) -> set[str]:
    return {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)}


def test_the_access_log_names_no_part_of_a_key_however_it_was_sent(transactional_db, tmp_path):
    access_log = tmp_path / "access.log"
    server = ShippedGunicorn(
        tmp_path / "gunicorn.log", "--access-logfile", str(access_log), workers=1, threads=4
    )
    try:
        server.wait_ready()
        _, key = create_api_key(name="access-log-test")
        wrong = "sk_" + "Zq7" * 16  # shaped like a key, known to nobody
        url = f"{server.url}/v1/charges"
        sent = []
        for secret in (key, wrong):
            sent += [
                requests.get(url, auth=(secret, ""), timeout=10),  # curl -u sk_...:
                requests.get(url, headers={"Authorization": f"Bearer {secret}"}, timeout=10),
                requests.get(url, params={"api_key": secret}, timeout=10),
            ]
        assert [r.status_code for r in sent] == [200, 200, 401, 401, 401, 401]
        request_ids = [r.headers["Request-Id"] for r in sent]

        deadline = time.monotonic() + 10
        while access_log.read_text().count("/v1/charges") < 1 + len(sent):
            assert time.monotonic() < deadline, access_log.read_text()
            time.sleep(0.1)
    finally:
        server.stop()

    written = access_log.read_text()
    for secret in (key, wrong):
        leaked = {piece for piece in pieces(secret) if piece in written}
        assert leaked == set(), f"part of a key in the access log:\n{written}"
        basic = base64.b64encode(f"{secret}:".encode()).decode()
        assert {piece for piece in pieces(basic) if piece in written} == set(), written
    # The log is there and says what it should: a line per request, with its Request-Id.
    lines = written.splitlines()
    assert all(any(rid in line for line in lines) for rid in request_ids), written


# A path and a user agent written to forge a line of their own, each the way a client can
# send it: the path percent-encoded (gunicorn's %(U)s decodes it), the user agent raw.
FORGED = '10.0.0.9 - [07/Dec/2026:03:00:00 +0000] "GET /admin/ HTTP/1.1" 200 0'
FORGING_PATHS = [
    "/v1/x%0a" + quote(FORGED),
    "/v1/x%0d%0a" + quote(FORGED),
    "/v1/x%0d" + quote(FORGED),
    "/v1/x%1b[2K%1b[1G" + quote(FORGED),  # a terminal: erase the line, write another
    "/v1/x%e2%80%a8" + quote(FORGED),  # U+2028, a line break to some readers
    "/v1/x%c2%85" + quote(FORGED),  # U+0085 (NEL)
]
# gunicorn refuses a control character in a header (400, never logged), but lets the bytes
# 0x80-0xff through (RFC 9110's obs-text): read as Latin-1, \x85 is NEL and \x9b a
# terminal's CSI, both controls.
FORGING_AGENT = "curl/8\x85\x9b2K" + FORGED
REFUSED_AGENT = "curl/8\x1b[2K" + FORGED


def raw_get(port: int, target: str, user_agent: str = "test") -> int:
    """The status of `GET target` sent byte for byte as given (no client re-encoding)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {user_agent}\r\n"
            "Connection: close\r\n\r\n".encode("latin-1")
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_a_path_or_user_agent_cannot_forge_an_access_log_line(transactional_db, tmp_path):
    """Issue 44, finding 6: one request, one line, whatever its path or user agent hold."""
    access_log = tmp_path / "access.log"
    server = ShippedGunicorn(
        tmp_path / "gunicorn.log", "--access-logfile", str(access_log), workers=1, threads=4
    )
    try:
        server.wait_ready()
        statuses = [raw_get(server.port, path) for path in FORGING_PATHS]
        statuses.append(raw_get(server.port, "/v1/agent", user_agent=FORGING_AGENT))
        assert set(statuses) == {404}, statuses
        assert raw_get(server.port, "/v1/refused", user_agent=REFUSED_AGENT) == 400

        deadline = time.monotonic() + 10
        while access_log.read_text().count(" 404 ") < len(statuses):
            assert time.monotonic() < deadline, access_log.read_text()
            time.sleep(0.1)
    finally:
        server.stop()

    # Every line but the readiness checks' (GET /v1/charges, 401).
    lines = [line for line in access_log.read_text().splitlines() if "/v1/charges" not in line]
    assert len(lines) == len(statuses), "\n".join(lines)
    assert all(line.startswith("127.0.0.1 [") for line in lines), "\n".join(lines)
    for line in lines:
        assert not any(separator in line for separator in "\r\x1b\x85\u2028"), repr(line)
    # What was sent is still there to read, percent-encoded as it was sent or escaped.
    assert [line.count(" 404 ") for line in lines] == [1] * len(lines), "\n".join(lines)
    assert "/v1/x%0a10.0.0.9" in lines[0], lines[0]
    assert "curl/8\\x85\\x9b2K10.0.0.9" in lines[-1], lines[-1]
    assert "/v1/refused" not in "\n".join(lines)  # refused before it was a request
