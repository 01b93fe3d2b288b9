"""With the pool production runs (DATABASE_POOL_MAX_SIZE), a request that arrives while
PostgreSQL hangs gives up within DATABASE_POOL_TIMEOUT_SECONDS, whose default is as short
as the connect timeout, and answers 503: it does not hold its thread for ten seconds
(issue 44, the chaos run). Real gunicorn as shipped, its database reached through a
relay this test can cut."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from django.db import connection

from ledger_app.access.api_keys import create_api_key
from tests import processes
from tests.ops.serving import ShippedGunicorn

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

DEFAULT_WAIT = 3  # DATABASE_POOL_TIMEOUT_SECONDS and DATABASE_CONNECT_TIMEOUT_SECONDS
MARGIN = 2.5  # a bound, not a speed target


class Relay:
    """A TCP relay to PostgreSQL. `hang()` drops every relayed connection and from then on
    accepts new ones and never answers, as a database host that stopped responding."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.hanging = threading.Event()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.sockets.append(client)
            if self.hanging.is_set():
                continue  # held open, never answered
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def hang(self) -> None:
        self.hanging.set()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def close(self) -> None:
        self.listener.close()
        self.hang()


def through(relay: Relay) -> str:
    parts = urlsplit(processes.test_database_url())
    netloc = f"{parts.netloc.rsplit('@', 1)[0]}@127.0.0.1:{relay.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def test_a_pooled_request_gives_up_quickly_while_the_database_hangs(tmp_path):
    key = create_api_key(name="shop")[1]
    relay = Relay(int(connection.settings_dict["PORT"] or 5432))
    server = ShippedGunicorn(
        tmp_path / "gunicorn.log",
        workers=1,
        threads=4,
        DATABASE_URL=through(relay),
        DATABASE_POOL_MAX_SIZE="4",
    )
    try:
        server.wait_ready()
        auth = {"Authorization": f"Bearer {key}"}
        assert requests.get(f"{server.url}/v1/refunds", headers=auth, timeout=10).ok

        relay.hang()
        answers = []
        for _ in range(3):  # the first may meet a dropped connection; the rest wait
            started = time.monotonic()
            answer = requests.get(f"{server.url}/v1/refunds", headers=auth, timeout=30)
            answers.append((answer.status_code, time.monotonic() - started))
    finally:
        server.stop()
        relay.close()

    assert [status for status, _ in answers] == [503, 503, 503], answers
    assert max(seconds for _, seconds in answers) < DEFAULT_WAIT + MARGIN, answers
