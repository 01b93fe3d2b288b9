"""Slowloris (issue 44, finding 12): a gunicorn thread reads a request from its first byte to
its last, so clients that send their headers a line at a time hold every thread. Behind
the shipped nginx (deploy/nginx/backoffice.conf, only ports, upstream and certificate
replaced) the same 100 slow clients cost gunicorn nothing: nginx holds them, drops them at
its header timeout, and a normal request is answered at once. Against gunicorn reached
directly, as the contrast that shows the attack is real, it is not answered at all."""

from __future__ import annotations

import ast
import base64
import re
import time
from urllib.parse import quote

import pytest
import requests
import urllib3

from ledger_app.access.api_keys import create_api_key
from tests.ops.serving import NGINX_CONF, Nginx, ShippedGunicorn, SlowClients, seconds_to_answer
from tests.processes import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SLOW_CLIENTS = 100
HEADER_TIMEOUT = 10  # client_header_timeout in the shipped file


@pytest.fixture
def gunicorn(transactional_db, tmp_path):
    # The server the finding stopped with 20 slow clients: one process of 8 threads.
    server = ShippedGunicorn(tmp_path / "gunicorn.log", workers=1, threads=8, LOG_LEVEL="WARNING")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def nginx(nginx_binary, gunicorn):
    proxy = Nginx(nginx_binary, upstream_port=gunicorn.port)
    try:
        proxy.wait_ready()
        yield proxy
    finally:
        proxy.stop()


def test_behind_the_shipped_nginx_100_slow_clients_hold_up_nobody(gunicorn, nginx):
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    _, key = create_api_key(name="slowloris-test")
    bearer = {"Authorization": f"Bearer {key}"}

    took, status = seconds_to_answer(f"{nginx.url}/v1/charges", 10, headers=bearer)
    assert status == 200, nginx.log() + gunicorn.log()

    slow = SlowClients(nginx.https_port, SLOW_CLIENTS, tls=True)
    try:
        time.sleep(3)  # every one of them has sent lines since; none has finished
        assert len(slow.sockets) == SLOW_CLIENTS, "nginx dropped slow clients before its timeout"
        took, status = seconds_to_answer(f"{nginx.url}/v1/charges", 10, headers=bearer)
        assert (status, took < 2) == (200, True), f"{status} after {took:.1f} s"
        print(f"through nginx, with {SLOW_CLIENTS} slow clients: 200 in {took:.3f} s")

        # Past its header timeout nginx has let go of every one of them.
        deadline = time.monotonic() + HEADER_TIMEOUT + 10
        while slow.sockets and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slow.closed == SLOW_CLIENTS, f"{len(slow.sockets)} slow clients still connected"
    finally:
        slow.close()
    assert gunicorn.process.poll() is None, gunicorn.log()


def test_gunicorn_reached_directly_is_stopped_by_the_same_slow_clients(gunicorn):
    """The contrast: why docs/operating/serving.md says gunicorn must sit behind a
    buffering proxy. If this starts to pass, gunicorn has learned to hold slow clients off
    itself; the proxy is still what the docs ask for."""
    took, status = seconds_to_answer(f"{gunicorn.url}/v1/charges", 10)
    assert status == 401

    slow = SlowClients(gunicorn.port, SLOW_CLIENTS)
    try:
        time.sleep(3)
        took, status = seconds_to_answer(f"{gunicorn.url}/v1/charges", 5)
        assert status == "ReadTimeout", f"answered {status} in {took:.1f} s"
    finally:
        slow.close()
    # Once they go, it answers again.
    took, status = seconds_to_answer(f"{gunicorn.url}/v1/charges", 10)
    assert status == 401


PIECE = 8  # no 8 characters in a row of a key appear in the log
FORGED = '10.0.0.9 [07/Dec/2026:03:00:00 +0000] "GET /admin/ HTTP/1.1" 200 0 0.001 "x"'


def test_the_shipped_access_log_names_no_key_and_forges_no_line(gunicorn, nginx):
    """Issue 44, findings 11 and 6, for nginx: its default format ("combined") writes the
    Basic user name (the whole key of `curl -u sk_...:`), the query string and the Referer.
    The shipped format writes none of them, and a %0a path stays on its line."""
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    _, key = create_api_key(name="nginx-access-log-test")
    url = f"{nginx.url}/v1/charges"

    def get(target: str, **kwargs) -> requests.Response:
        return requests.get(target, timeout=10, verify=False, **kwargs)  # noqa: S501

    sent = [
        get(url, auth=(key, "")),  # curl -u sk_...:
        get(url, headers={"Authorization": f"Bearer {key}"}),
        get(url, params={"api_key": key}, headers={"Referer": f"{url}?k={key}"}),
        get(f"{nginx.url}/v1/x%0a{quote(FORGED)}"),
        get(f"{nginx.url}/v1/x%0d%1b[2K{quote(FORGED)}"),
        get(url, headers={"User-Agent": "curl/8\x1b[2K" + FORGED}),
    ]
    # gunicorn refuses the control character in the user agent; nginx logs that 400.
    assert [r.status_code for r in sent] == [200, 200, 401, 404, 404, 400]

    deadline = time.monotonic() + 10
    while nginx.access_log.read_text().count(" HTTP/1.1") < len(sent):
        assert time.monotonic() < deadline, nginx.access_log.read_text()
        time.sleep(0.1)
    written = nginx.access_log.read_text()

    basic = base64.b64encode(f"{key}:".encode()).decode()
    for secret in (key, basic):
        leaked = {secret[i : i + PIECE] for i in range(len(secret) - PIECE + 1)} & {
            written[i : i + PIECE] for i in range(len(written) - PIECE + 1)
        }
        assert leaked == set(), f"part of a key in nginx's access log:\n{written}"
    lines = written.splitlines()
    assert len(lines) == len(sent), written
    assert all(line.startswith("127.0.0.1 [") for line in lines), written
    assert "\x1b" not in written and "\r" not in written, repr(written)
    assert "/v1/x\\x0A10.0.0.9" in lines[3], lines[3]


def seconds(value: str) -> float:
    """An nginx time ("3s", "500ms", "1m", "3") in seconds."""
    number, unit = re.fullmatch(r"(\d+)(ms|s|m)?", value).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[unit]


def test_nginx_lets_an_idle_upstream_connection_go_before_gunicorn_does():
    """Issue 44, finding 12's review: were gunicorn first to close an idle kept-alive
    connection, a request nginx sent on it as it closed would get a 502 (a POST is not
    retried). The upstream block's keepalive_timeout (nginx's default: 60 s) stays under
    gunicorn's keepalive (gunicorn's default: 2 s) with a second to spare: gunicorn looks
    for idle connections about once a second."""
    from gunicorn.config import Config

    upstream = re.search(r"^upstream backoffice \{(.*?)^\}", NGINX_CONF.read_text(), re.M | re.S)
    assert upstream is not None
    timeouts = re.findall(r"^\s*keepalive_timeout\s+(\S+);", upstream[1], re.M)
    nginx_idle = seconds(timeouts[0]) if timeouts else 60

    config = ast.parse((ROOT / "gunicorn.conf.py").read_text())
    assigned = [
        node.value
        for node in config.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["keepalive"]
    ]
    gunicorn_idle = ast.literal_eval(assigned[-1]) if assigned else Config().keepalive
    assert nginx_idle + 1 <= gunicorn_idle, (nginx_idle, gunicorn_idle)
