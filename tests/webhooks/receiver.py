"""A webhook receiver for tests: an HTTP server on 127.0.0.1, in a thread of the test
process, that logs every delivery it reads and answers as the test tells it to."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    event_id: str
    body: bytes
    signature: str
    status: int  # what the receiver answered (or was about to, if the sender gave up)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    delay: float = 0.0  # seconds before answering
    hold: threading.Event | None = None  # answer only once this is set
    trickle: float = 0.0  # if set, the answer is written a byte at a time, this far apart


# How to answer the n-th request (counting from 1) for an event.
Behaviour = Callable[[str, int], Answer]


def always_ok(event_id: str, nth: int) -> Answer:
    return Answer()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Receiver:
    def __init__(self, behaviour: Behaviour = always_ok) -> None:
        self.behaviour = behaviour
        self.port = free_port()
        self.received: list[Received] = []
        self.arrived = threading.Event()  # set on every request read
        self._lock = threading.Lock()
        self._per_event: Counter = Counter()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def start(self) -> Receiver:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Down: connections are refused until start() again (on the same port)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def acknowledged(self) -> Counter:
        """How many times each event was answered with a 2xx."""
        with self._lock:
            return Counter(r.event_id for r in self.received if 200 <= r.status < 300)

    def wait_for(self, count: int, timeout: float = 30) -> None:
        """Until `count` requests have arrived."""
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.received) >= count, f"{len(self.received)} of {count} arrived"

    def _log(self, body: bytes, signature: str) -> Answer:
        event_id = json.loads(body)["id"]
        with self._lock:
            self._per_event[event_id] += 1
            answer = self.behaviour(event_id, self._per_event[event_id])
            self.received.append(Received(event_id, body, signature, answer.status))
        self.arrived.set()
        return answer

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = receiver._log(body, self.headers.get("Stripe-Signature", ""))
                if answer.hold is not None:
                    answer.hold.wait(30)
                time.sleep(answer.delay)
                if answer.trickle:
                    self._trickle(answer)
                    return
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sender gave up or died

            def _trickle(self, answer: Answer) -> None:
                """Each byte well inside any read timeout, the whole far outside it."""
                raw = f"HTTP/1.0 {answer.status} OK\r\nContent-Length: 2\r\n\r\nok".encode()
                try:
                    for byte in raw:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(answer.trickle)
                except OSError:
                    pass  # the sender gave up
                self.close_connection = True

            def log_message(self, format, *args):  # http.server's name
                pass

        return Handler
