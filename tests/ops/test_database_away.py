"""While PostgreSQL is away, admin pages answer 503 with a short page (the API its 503
envelope), not Django's 500, and a server that does not answer costs a request
DATABASE_CONNECT_TIMEOUT_SECONDS, not minutes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.db import connection

from ledger_app.access.api_keys import create_api_key
from tests.processes import free_loopback_port

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ADMIN_PAGE = "/admin/ledger_app/refund/"
MARGIN = 2.0  # seconds past the connect timeout: a bound, not a speed target


@pytest.fixture
def admin_pages(admin_client):
    """The signed-in admin's browser: it sees the response a server sends, not the
    exception (Django's test client re-raises one by default)."""
    admin_client.raise_request_exception = False
    return admin_client


@contextmanager
def database_at(port: int) -> Iterator[None]:
    """This thread's connection pointed at 127.0.0.1:`port` (a fresh connection each
    request), then back at the test database."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(port))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@contextmanager
def silent_server() -> Iterator[socket.socket]:
    """A port that takes TCP connections and never says a word, as a server that hangs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield listener
    finally:
        listener.close()


def timed_get(client, path: str, limit: float, **headers):
    """GET in a thread; (response or None, seconds). After `limit` seconds the silent
    server is not waited for any more: the caller closes it and the thread ends."""
    result: dict = {}

    def get() -> None:
        started = time.monotonic()
        try:
            result["response"] = client.get(path, **headers)
        finally:
            result["seconds"] = time.monotonic() - started
            connection.close()

    thread = threading.Thread(target=get, daemon=True)
    thread.start()
    thread.join(limit)
    return thread, result


def assert_away_page(response) -> None:
    assert response.status_code == 503, response.content[:500]
    assert b"cannot reach its database" in response.content
    assert response["Content-Type"].startswith("text/html")
    assert response["Retry-After"] == "5"
    assert "no-store" in response["Cache-Control"]


def test_admin_pages_answer_503_while_the_database_refuses(admin_pages):
    with database_at(free_loopback_port()):  # nothing listens there
        response = admin_pages.get(ADMIN_PAGE)
        home = admin_pages.get("/admin/")

    assert_away_page(response)
    assert_away_page(home)
    assert admin_pages.get(ADMIN_PAGE).status_code == 200  # back once it is


def test_the_api_answers_its_own_503_envelope(client):
    key = create_api_key(name="shop")[1]

    with database_at(free_loopback_port()):
        response = client.get("/v1/refunds", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"


def test_a_server_that_does_not_answer_costs_the_connect_timeout(admin_pages):
    bound = getattr(settings, "DATABASE_CONNECT_TIMEOUT_SECONDS", 3)  # its default

    with silent_server() as listener, database_at(listener.getsockname()[1]):
        thread, result = timed_get(admin_pages, ADMIN_PAGE, bound + MARGIN + 3)
        listener.close()  # a request still waiting (no connect timeout) ends now
        thread.join(30)

    assert result["seconds"] < bound + MARGIN, result["seconds"]
    assert_away_page(result["response"])
    assert connection.settings_dict["OPTIONS"]["connect_timeout"] == bound
