"""Slow receivers that see how many deliveries they hold at once, between them: each
request is held until `together` are held at the same moment (or `hold` seconds pass),
then answered 200. One sender at a time never has two held at once; N lanes do."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler

from tests.webhooks.receiver import Receiver


class Overlap:
    """What several receivers hold at once. A request counts from the moment it is read
    until just before its answer is written, so a sender's next request can never be
    counted with its last one."""

    def __init__(self, together: int, hold: float) -> None:
        self.together, self.hold = together, hold
        self.held = 0
        self.peak = 0
        self.acknowledged: Counter[tuple[int, str]] = Counter()  # (port, event id)
        self._changed = threading.Condition()

    def receivers(self, count: int) -> list[Receiver]:
        return [OverlapReceiver(self).start() for _ in range(count)]

    def serve(self, port: int, event_id: str) -> None:
        with self._changed:
            self.held += 1
            self.peak = max(self.peak, self.held)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.held >= self.together, timeout=self.hold)
            self.held -= 1
            self.acknowledged[(port, event_id)] += 1


class OverlapReceiver(Receiver):
    def __init__(self, overlap: Overlap) -> None:
        super().__init__()
        self.overlap = overlap

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver._log(body, self.headers.get("Stripe-Signature", ""))
                receiver.overlap.serve(receiver.port, json.loads(body)["id"])
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sender gave up or died

            def log_message(self, format, *args):  # http.server's name
                pass

        return Handler
