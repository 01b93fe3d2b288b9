"""The API's rate limits (API_RATE_LIMIT per key, API_AUTH_FAILURE_LIMIT per address) are
one count shared by every process and machine: fixed windows in the database, counted
with one atomic statement, exact under concurrency, failing open on a database error."""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
import requests
from django.db import connection

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import RateCounter
from ledger_app.operations import rate_counters
from ledger_app.operations.rate_counters import count_in_window, purge_ended_windows
from tests.clock import start_of_a_window
from tests.processes import GunicornServer

pytestmark = pytest.mark.sqlite_pass

WRONG = "sk_test_not_a_key_0123456789"
HOUR = 3600


def get(client, key, address="10.1.1.1", path="/v1/charges"):
    return client.get(path, HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR=address)


@pytest.fixture
def clock(monkeypatch):
    """The limiter's clock, set by the test (`clock.now = ...`); it starts on the whole
    hour three hours ago, so where a window starts and ends is the test's choice."""

    class Clock:
        now = (time.time() // HOUR - 3) * HOUR

    monkeypatch.setattr(rate_counters, "clock", lambda: Clock.now)
    # As if this process had just purged: no purge on the way unless a test asks for one.
    monkeypatch.setattr(rate_counters, "_last_purge_at", time.monotonic())
    return Clock


def wait_out_the_end_of_the_window(period: int, margin: float) -> int:
    """The index of a window with at least `margin` seconds left: the test's requests all
    fall into it (an hour's window ends at most once a test run, so this rarely waits). For
    servers the test starts, which keep the real clock; in this process, tests move theirs."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 0.1)
    return int(time.time() // period)


@pytest.mark.django_db
class TestCountInWindow:
    def test_counts_up_to_the_limit_then_refuses_without_counting(self, clock):
        answers = [
            count_in_window(key="k", limit=3, period_seconds=HOUR).within_limit for _ in range(5)
        ]

        assert answers == [True, True, True, False, False]
        assert RateCounter.objects.get().count == 3

    def test_a_window_holds_its_period_and_the_next_starts_from_zero(self, clock):
        clock.now += 59.75  # binary fractions: the sums below are exact
        count_in_window(key="k", limit=1, period_seconds=60)
        last_moment = count_in_window(key="k", limit=1, period_seconds=60)
        clock.now += 0.25
        next_window = count_in_window(key="k", limit=1, period_seconds=60)

        assert not last_moment.within_limit
        assert last_moment.seconds_left == pytest.approx(0.25)
        assert next_window.within_limit
        assert next_window.seconds_left == pytest.approx(60)
        windows = RateCounter.objects.order_by("window_started_at")
        assert [(w.window_ends_at - w.window_started_at).total_seconds() for w in windows] == [
            60,
            60,
        ]
        assert windows[1].window_started_at == datetime.fromtimestamp(clock.now, UTC)

    def test_another_period_is_another_count(self, clock):
        count_in_window(key="k", limit=1, period_seconds=60)

        # 1/second after 1/minute (a deploy that changes the setting): both windows start
        # at the same second, and the first request of the new limit is not refused.
        assert count_in_window(key="k", limit=1, period_seconds=1).within_limit
        assert RateCounter.objects.count() == 2

    def test_a_purge_deletes_ended_windows_only(self, clock):
        count_in_window(key="ended", limit=5, period_seconds=60)
        clock.now += 60
        count_in_window(key="current", limit=5, period_seconds=60)

        deleted = purge_ended_windows()

        assert deleted == 1
        assert list(RateCounter.objects.values_list("key", flat=True)) == ["current/60s"]

    def test_opening_a_window_purges_at_most_once_a_minute_per_process(self, clock, monkeypatch):
        count_in_window(key="old-a", limit=5, period_seconds=HOUR)
        count_in_window(key="old-b", limit=5, period_seconds=HOUR)
        # As in a process that has not purged for a minute.
        monkeypatch.setattr(rate_counters, "_last_purge_at", -math.inf)
        start = clock.now

        clock.now = start + 2 * HOUR
        count_in_window(key="new-a", limit=5, period_seconds=HOUR)  # opens a window: purges
        after_first = set(RateCounter.objects.values_list("key", flat=True))
        clock.now = start
        count_in_window(key="old-c", limit=5, period_seconds=HOUR)
        clock.now = start + 2 * HOUR
        count_in_window(key="new-b", limit=5, period_seconds=HOUR)  # within the minute: not

        assert after_first == {f"new-a/{HOUR}s"}
        assert f"old-c/{HOUR}s" in set(RateCounter.objects.values_list("key", flat=True))


@pytest.mark.django_db
class TestApiKeyThrottle:
    @pytest.fixture(autouse=True)
    def two_an_hour(self, settings, time_machine):
        settings.API_RATE_LIMIT = "2/hour"
        time_machine.move_to(start_of_a_window(HOUR), tick=True)

    def test_past_the_limit_429_with_retry_after_until_the_window_ends(self, client, api_key):
        answers = [get(client, api_key).status_code for _ in range(4)]
        refused = get(client, api_key)

        assert answers == [200, 200, 429, 429]
        assert refused.json()["error"]["code"] == "rate_limit"
        expected = math.ceil(HOUR - time.time() % HOUR)
        assert int(refused["Retry-After"]) in (expected, expected + 1)  # the second ticked

    def test_a_different_key_has_its_own_budget(self, client, api_key):
        _, other_key = create_api_key(name="other client")
        for _ in range(3):
            get(client, api_key)

        assert get(client, api_key).status_code == 429
        assert [get(client, other_key).status_code for _ in range(3)] == [200, 200, 429]

    def test_a_refused_request_costs_the_key_lookup_and_one_counter_statement(
        self, client, api_key, django_assert_num_queries
    ):
        for _ in range(2):
            get(client, api_key)

        with django_assert_num_queries(2) as queries:
            assert get(client, api_key).status_code == 429

        assert "ON CONFLICT" in queries.captured_queries[1]["sql"]


@pytest.mark.django_db(transaction=True)
class TestDatabaseErrors:
    """A limiter whose table fails (here: missing, as before `migrate`) serves a right key
    uncounted and refuses a wrong one with 401, never a 500."""

    @pytest.fixture
    def counter_table_gone(self):
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE ledger_app_ratecounter RENAME TO ratecounter_away")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE ratecounter_away RENAME TO ledger_app_ratecounter")

    def test_right_keys_are_served_and_wrong_keys_refused_401(
        self, settings, client, counter_table_gone, caplog
    ):
        settings.API_RATE_LIMIT = "1/hour"
        settings.API_AUTH_FAILURE_LIMIT = "1/hour"
        _, secret = create_api_key(name="fail-open")

        served = [get(client, secret).status_code for _ in range(3)]
        refused = [get(client, WRONG).status_code for _ in range(3)]

        assert served == [200, 200, 200]
        assert refused == [401, 401, 401]
        assert "rate counter unavailable" in caplog.text


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_count_is_exact_under_concurrency(time_machine):
    threads, limit = 40, 25
    time_machine.move_to(start_of_a_window(HOUR), tick=True)  # the threads' clock too
    barrier = threading.Barrier(threads)
    answers: list[bool] = []

    def use() -> None:
        try:
            barrier.wait(10)
            answers.append(
                count_in_window(key="busy", limit=limit, period_seconds=HOUR).within_limit
            )
        finally:
            connection.close()

    workers = [threading.Thread(target=use) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)

    assert len(answers) == threads
    assert answers.count(True) == limit
    assert RateCounter.objects.get().count == limit


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_counters_table_writes_no_wal_on_postgresql():
    # A WAL flush per API request (4 ms measured) for a count that may be lost in a crash.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relpersistence FROM pg_class WHERE relname = 'ledger_app_ratecounter'"
        )
        assert cursor.fetchone() == ("u",)


def test_login_lockouts_count_in_the_database_every_process_shares(settings):
    # django-axes's cache handler would count in CACHES["default"], memory per process.
    assert settings.AXES_HANDLER == "axes.handlers.database.AxesDatabaseHandler"


# --- the headline: one count across the processes of a real server ------------------------

ACCESS_LINE = re.compile(r"^rate-limit-test <(\d+)> (\d{3}) (\S+)$", re.MULTILINE)
LIMIT = 10
FLOOD = 40  # concurrent requests, more than the server has threads (4 workers x 4)
FLOODED = "/v1/refunds"  # not /v1/charges, which wait_ready polls without a key


@pytest.fixture
def server(transactional_db, tmp_path):
    """gunicorn with four worker processes, both limits 10 an hour, and an access log that
    names the process that answered each request."""
    srv = GunicornServer(
        tmp_path,
        workers=4,
        threads=4,
        API_RATE_LIMIT=f"{LIMIT}/hour",
        API_AUTH_FAILURE_LIMIT=f"{LIMIT}/hour",
        GUNICORN_CMD_ARGS=(
            # At most 4 connections a worker (its threads): a gthread worker otherwise
            # accepts a whole burst alone, and the flood must reach several processes.
            "--worker-connections 4 "
            "--access-logfile - --access-logformat 'rate-limit-test %(p)s %(s)s %(U)s'"
        ),
        LOG_LEVEL="ERROR",
    )
    try:
        srv.wait_ready()
        wait_until_every_worker_answers(srv, workers=4)
        yield srv
    finally:
        srv.stop()


def wait_until_every_worker_answers(server: GunicornServer, workers: int) -> None:
    """wait_ready returns once one worker answers; the others may still be loading Django,
    and a flood sent then is all answered by the one that is up. Bursts to /healthz (no key,
    no limit) until each worker has written an access line."""
    deadline = time.monotonic() + 60
    answered: set[str] = set()
    while len(answered) < workers:
        assert time.monotonic() < deadline, f"only {len(answered)} of {workers} workers answer"
        burst = [
            threading.Thread(
                target=requests.get, args=(f"{server.url}/healthz",), kwargs={"timeout": 30}
            )
            for _ in range(2 * workers)
        ]
        for client in burst:
            client.start()
        for client in burst:
            client.join(30)
        answered = {pid for pid, _, path in ACCESS_LINE.findall(server.log()) if path == "/healthz"}


def flood(url: str, key: str) -> list[int]:
    """FLOOD requests with one key, all let go at once, each on its own connection."""
    barrier = threading.Barrier(FLOOD)
    statuses: list[int] = []

    def send() -> None:
        barrier.wait(10)
        statuses.append(
            requests.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30).status_code
        )

    clients = [threading.Thread(target=send) for _ in range(FLOOD)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(60)
    return statuses


def answers_by_process(server: GunicornServer, path: str) -> dict[str, Counter]:
    server.stop()  # every worker has written its access lines
    by_process: dict[str, Counter] = {}
    for pid, status, logged_path in ACCESS_LINE.findall(server.log()):
        if logged_path == path:
            by_process.setdefault(pid, Counter())[int(status)] += 1
    return by_process


def assert_one_count_across_processes(by_process: dict[str, Counter], through: int) -> None:
    """The flood was answered by several processes, so a count per process would have let
    more than LIMIT through: this is what the shared count changes."""
    per_process_would_allow = sum(min(sum(c.values()), LIMIT) for c in by_process.values())
    assert len(by_process) >= 2, by_process
    assert per_process_would_allow > LIMIT, by_process
    assert sum(c[through] for c in by_process.values()) == LIMIT


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_key_gets_exactly_its_limit_from_a_server_of_several_processes(server):
    _, key = create_api_key(name="flooding client")
    _, other_key = create_api_key(name="quiet client")
    window = wait_out_the_end_of_the_window(HOUR, margin=60)

    statuses = flood(f"{server.url}{FLOODED}", key)
    refused = requests.get(
        f"{server.url}/v1/charges", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    other = requests.get(
        f"{server.url}/v1/charges", headers={"Authorization": f"Bearer {other_key}"}, timeout=30
    )

    assert int(time.time() // HOUR) == window, "the window ended during the test"
    assert sorted(statuses) == [200] * LIMIT + [429] * (FLOOD - LIMIT)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "invalid_request_error"
    assert 1 <= int(refused.headers["Retry-After"]) <= math.ceil(HOUR - time.time() % HOUR) + 1
    assert other.status_code == 200  # another key has its own budget
    assert_one_count_across_processes(answers_by_process(server, FLOODED), through=200)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_address_gets_exactly_its_wrong_keys_from_a_server_of_several_processes(server):
    _, key = create_api_key(name="right key, same address")
    window = wait_out_the_end_of_the_window(HOUR, margin=60)

    statuses = flood(f"{server.url}{FLOODED}", WRONG)
    right = requests.get(
        f"{server.url}/v1/charges", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )

    assert int(time.time() // HOUR) == window, "the window ended during the test"
    assert sorted(statuses) == [401] * LIMIT + [429] * (FLOOD - LIMIT)
    assert right.status_code == 200  # a right key from the flooding address is not held back
    assert_one_count_across_processes(answers_by_process(server, FLOODED), through=401)
