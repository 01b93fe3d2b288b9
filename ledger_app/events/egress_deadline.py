"""One deadline for a whole webhook request, for ledger_app/events/egress.py.

urllib3's timeouts bound each socket operation, not the request: a receiver that sends its
answer a byte at a time, each inside the read timeout, keeps a request open as long as it
likes (and a webhook delivery past its lease, when another lane or worker sends it
again). A timer shuts the request's sockets down once its time is up, which ends any read
or write at once; egress.post() then reports a timeout. The sockets are found as they are
made: the pools egress.post() uses make their connections with classes that hand each new
socket (before any TLS handshake or CONNECT tunnel) to the Deadline running in that
thread."""

from __future__ import annotations

import contextlib
import socket
import threading

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

_current = threading.local()


class Deadline:
    """`seconds` from start() to end(); past it, every socket the request made is shut
    down and `expired` is true."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._ended = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> Deadline:
        _current.deadline = self
        self._timer.start()
        return self

    def end(self) -> None:
        """The request is over (its sockets are about to be closed): nothing is shut
        down after this."""
        with self._lock:
            self._ended = True
        self._timer.cancel()
        if getattr(_current, "deadline", None) is self:
            _current.deadline = None

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._ended:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)


class _Watched(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        deadline = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.watch(sock)
        return sock


class _WatchedHTTP(_Watched, HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTP


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPS


def watched(pool: urllib3.PoolManager | urllib3.HTTPConnectionPool) -> None:
    """Make `pool` open its connections (directly, or through a ProxyManager's pools, a
    CONNECT tunnel included) so that the current Deadline sees their sockets."""
    if isinstance(pool, urllib3.PoolManager):
        pool.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    elif isinstance(pool, urllib3.HTTPSConnectionPool):
        pool.ConnectionCls = _WatchedHTTPS
    else:
        pool.ConnectionCls = _WatchedHTTP
