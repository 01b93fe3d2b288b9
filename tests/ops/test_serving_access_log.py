"""No API key in gunicorn's access log (issue 44, finding 11). `make run` turns the access log
on; a client sending its key the way `curl -u sk_...:` does put it in the HTTP Basic user
name, which gunicorn's default format writes. Served with the shipped gunicorn.conf.py and
make run's `--access-logfile`, a key sent every way a client might (Basic user, Bearer,
even in the query string, right or wrong) leaves no part of itself in the log."""

from __future__ import annotations

import base64
import time

import pytest
import requests

from ledger_app.services.api_keys import create_api_key
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
