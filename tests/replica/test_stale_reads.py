"""ledger_app.replica on its own: which database a stale-tolerant read goes to, and what a
failing replica makes of it (test_read_replica.py proves it against a real one)."""

import logging

import pytest
from django.db import OperationalError, ProgrammingError

from ledger_app import replica
from ledger_app.errors import ResourceMissing


class FakeConnection:
    closed = False

    def close(self):
        self.closed = True


@pytest.fixture
def with_replica(monkeypatch):
    """A replica configured (its connection a fake), not resting after a failure."""
    monkeypatch.setattr(replica, "configured", lambda: True)
    monkeypatch.setattr(replica, "_down_until", 0.0)
    fake = FakeConnection()
    monkeypatch.setattr(replica, "connections", {replica.REPLICA: fake})
    return fake


def reader(fails_on_replica: Exception | None = None):
    """A read that records where it ran, and fails on the replica with the given error."""
    calls = []

    def read(alias):
        calls.append(alias)
        if alias == replica.REPLICA and fails_on_replica is not None:
            raise fails_on_replica
        return f"rows from {alias}"

    return read, calls


def test_without_a_replica_reads_go_to_the_primary(monkeypatch):
    monkeypatch.setattr(replica, "configured", lambda: False)
    read, calls = reader()
    assert replica.reads() == "default"
    assert replica.stale_ok(read) == "rows from default"
    assert calls == ["default"]


def test_with_a_replica_reads_go_to_it(with_replica):
    read, calls = reader()
    assert replica.reads() == "replica"
    assert replica.stale_ok(read) == "rows from replica"
    assert calls == ["replica"]


def test_a_failing_replica_is_read_around_and_rests(with_replica, monkeypatch, caplog):
    read, calls = reader(OperationalError("connection refused"))
    with caplog.at_level(logging.WARNING, logger="ledger_app.replica"):
        assert replica.stale_ok(read) == "rows from default"
    assert calls == ["replica", "default"]
    assert with_replica.closed
    assert "read replica failed" in caplog.text and "connection refused" in caplog.text

    # Resting: reads go to the primary without trying the replica, and say nothing.
    caplog.clear()
    read, calls = reader()
    assert replica.reads() == "default"
    assert replica.stale_ok(read) == "rows from default"
    assert calls == ["default"] and caplog.text == ""

    # After the rest, the replica is tried again.
    monkeypatch.setattr(replica.time, "monotonic", lambda: replica._down_until + 1)
    assert replica.reads() == "replica"


def test_another_database_error_falls_back_for_that_read_only(with_replica, caplog):
    read, calls = reader(ProgrammingError('column "new_field" does not exist'))
    with caplog.at_level(logging.WARNING, logger="ledger_app.replica"):
        assert replica.stale_ok(read) == "rows from default"
    assert calls == ["replica", "default"]
    assert "new_field" in caplog.text
    assert not with_replica.closed
    assert replica.reads() == "replica"


def test_an_object_the_replica_lacks_is_looked_for_on_the_primary(with_replica, caplog):
    read, calls = reader(ResourceMissing("No such refund"))
    assert replica.stale_ok(read, missing=(ResourceMissing,)) == "rows from default"
    assert calls == ["replica", "default"]
    assert caplog.text == "" and replica.reads() == "replica"


def test_what_fails_on_the_primary_is_raised(with_replica):
    def read(alias):
        raise ResourceMissing(f"No such refund on {alias}")

    with pytest.raises(ResourceMissing, match="on default"):
        replica.stale_ok(read, missing=(ResourceMissing,))


def test_other_errors_on_the_replica_are_raised(with_replica):
    read, calls = reader(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        replica.stale_ok(read)
    assert calls == ["replica"]
