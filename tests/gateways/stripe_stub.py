"""A local imitation of just enough of Stripe's API for the Stripe adapter's tests.

Form-encoded bodies with bracket notation, JSON objects with `id`/`object`, Stripe's error
envelope, a `Request-Id` header, and idempotency: the same key with the same parameters
replays the stored answer (`Idempotent-Replayed: true`); the same key with other parameters
is a 400 `idempotency_error`. Every request is recorded in `requests`.

Misbehaviour is scripted per call with `script(method, path, *behaviours)`; each matching
request takes the next one. Faults sit in front of the idempotency store (like a proxy that
loses an answer), so a retry after "apply_then_500" replays the stored success.
- "500" (or any other status: "409", "429", "503"...): answer it without applying anything;
- "apply_then_500": apply (and store the answer), then answer 500;
- "sleep": apply, then sleep `sleep_seconds` before answering (past a short client timeout);
- "card_error": 402 card_declined (a charge is made, failed, and findable; stored);
- "already_refunded": 400 invalid_request_error `charge_already_refunded` (not stored);
- "pending", "failed", "canceled", "requires_action": the created object gets that status.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

STATUSES = {"pending", "failed", "canceled", "requires_action"}


class StripeStub:
    def __init__(self, sleep_seconds: float = 1.0):
        self.sleep_seconds = sleep_seconds
        self.requests: list[dict] = []
        self.charges: dict[str, dict] = {}
        self.refunds: dict[str, dict] = {}
        self.destination_details: object = None  # put on each refund made, when set
        self._idempotency: dict[str, tuple[str, int, dict]] = {}
        self._scripts: dict[tuple[str, str], deque] = defaultdict(deque)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StripeStub:
        serve = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        serve.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, method: str, path: str, *behaviours: str) -> None:
        self._scripts[(method, path)].extend(behaviours)

    def add_charge(self, amount: int = 1000, currency: str = "usd", **metadata) -> str:
        with self._lock:
            return self._new_charge(
                {"amount": amount, "currency": currency, "metadata": metadata}, "succeeded"
            )["id"]

    def calls(self, method: str, path: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and r["path"] == path]

    # --- request handling (called from the server's threads) ----------------------------

    def handle(self, method: str, path: str, headers, params: dict) -> tuple[int, dict]:
        key = headers.get("Idempotency-Key")
        self.requests.append({"method": method, "path": path, "key": key, "params": params})
        if not (headers.get("Authorization") or "").startswith("Bearer sk_"):
            return _error(401, "invalid_request_error", None, "Invalid API Key provided")
        queue = self._scripts[(method, path)]
        behaviour = queue.popleft() if queue else ""
        if behaviour.isdigit():
            status = int(behaviour)
            code = {409: "idempotency_key_in_use", 429: "rate_limit"}.get(status)
            return _error(status, "api_error", code, f"Scripted {status}.")
        if behaviour == "already_refunded":
            return _error(400, "invalid_request_error", "charge_already_refunded", "Refunded.")
        with self._lock:
            status, body = self._route(method, path, key, params, behaviour)
        if behaviour == "sleep":
            time.sleep(self.sleep_seconds)
        if behaviour == "apply_then_500":
            return _error(500, "api_error", None, "Something went wrong on Stripe's end.")
        return status, body

    def _route(self, method, path, key, params, behaviour) -> tuple[int, dict]:
        if method == "GET" and path == "/v1/refunds":
            return 200, self._list_refunds(params)
        if method == "GET" and path == "/v1/charges/search":
            return 200, self._search_charges(params["query"])
        if method != "POST" or path not in ("/v1/refunds", "/v1/charges"):
            return _error(404, "invalid_request_error", None, f"Unrecognized URL {path}")
        canonical = json.dumps([path, params], sort_keys=True)
        fingerprint = hashlib.sha256(canonical.encode()).hexdigest()
        if key in self._idempotency:
            stored_fingerprint, status, body = self._idempotency[key]
            if stored_fingerprint != fingerprint:
                return _error(400, "idempotency_error", None, "Keys for idempotent requests...")
            return status, {**body, "_replayed": True}
        if not str(params.get("amount", "")).isdigit():
            return _error(400, "invalid_request_error", None, "Invalid integer", "amount")
        params = {**params, "amount": int(params["amount"])}
        make = self._create_refund if path == "/v1/refunds" else self._create_charge
        status, body = make(params, behaviour)
        if status in (200, 402):  # refusals of the request itself bind nothing
            self._idempotency[key] = (fingerprint, status, body)
        return status, body

    def _create_refund(self, params, behaviour) -> tuple[int, dict]:
        charge = self.charges.get(params.get("charge"))
        if charge is None:
            return _error(404, "invalid_request_error", "resource_missing", "No such charge")
        if behaviour == "card_error":
            return _error(402, "card_error", "card_declined", "Your card was declined.")
        if charge["amount_refunded"] >= charge["amount"]:
            return _error(400, "invalid_request_error", "charge_already_refunded", "Refunded.")
        if params["amount"] > charge["amount"] - charge["amount_refunded"]:
            return _error(400, "invalid_request_error", None, "Amount too large", "amount")
        status = behaviour if behaviour in STATUSES else "succeeded"
        refund = {
            "id": f"re_{next(self._ids)}",
            "object": "refund",
            "amount": params["amount"],
            "charge": charge["id"],
            "currency": charge["currency"],
            "metadata": params.get("metadata", {}),
            "status": status,
            "failure_reason": "expired_or_canceled_card" if status == "failed" else None,
        }
        if self.destination_details is not None:
            refund["destination_details"] = self.destination_details
        if status not in ("failed", "canceled"):
            charge["amount_refunded"] += refund["amount"]
        self.refunds[refund["id"]] = refund
        return 200, refund

    def _create_charge(self, params, behaviour) -> tuple[int, dict]:
        if behaviour == "card_error":
            charge = self._new_charge(params, "failed")
            error = _error(402, "card_error", "card_declined", "Your card was declined.")
            error[1]["error"]["charge"] = charge["id"]
            return error
        return 200, self._new_charge(params, behaviour if behaviour in STATUSES else "succeeded")

    def _new_charge(self, params: dict, status: str) -> dict:
        charge = {
            "id": f"ch_{next(self._ids)}",
            "object": "charge",
            "amount": params["amount"],
            "amount_refunded": 0,
            "currency": params["currency"],
            "description": params.get("description"),
            "metadata": params.get("metadata", {}),
            "source": params.get("source"),
            "status": status,
            "failure_code": "card_declined" if status == "failed" else None,
        }
        self.charges[charge["id"]] = charge
        return charge

    def _list_refunds(self, params: dict) -> dict:
        found = [r for r in reversed(self.refunds.values()) if r["charge"] == params.get("charge")]
        if "starting_after" in params:
            ids = [r["id"] for r in found]
            found = found[ids.index(params["starting_after"]) + 1 :]
        limit = int(params.get("limit", 10))
        page = {"object": "list", "data": found[:limit], "url": "/v1/refunds"}
        return {**page, "has_more": len(found) > limit}

    def _search_charges(self, query: str) -> dict:
        match = re.fullmatch(r"metadata\['(\w+)'\]:'(.*)'", query)
        assert match is not None, f"the stub searches metadata only: {query}"
        key, value = match.groups()
        found = [c for c in reversed(self.charges.values()) if c["metadata"].get(key) == value]
        return {"object": "search_result", "data": found, "has_more": False, "next_page": None}


def _error(status, type_, code, message, param=None) -> tuple[int, dict]:
    return status, {"error": {"type": type_, "code": code, "message": message, "param": param}}


def fold(pairs: list[tuple[str, str]]) -> dict:
    """`metadata[a]=1` -> {"metadata": {"a": "1"}} (one level, all the adapter sends)."""
    folded: dict = {}
    for name, value in pairs:
        nested = re.fullmatch(r"(\w+)\[(\w*)\]", name)
        if nested:
            folded.setdefault(nested[1], {})[nested[2]] = value
        else:
            folded[name] = value
    return folded


def _handler(stub: StripeStub):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self._serve(urlsplit(self.path).query)

        def do_POST(self):
            self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())

        def _serve(self, encoded: str):
            params = fold(parse_qsl(encoded, keep_blank_values=True))
            path = urlsplit(self.path).path
            status, body = stub.handle(self.command, path, self.headers, params)
            replayed = body.pop("_replayed", False)
            payload = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Request-Id", f"req_{next(stub._ids)}")
                if replayed:
                    self.send_header("Idempotent-Replayed", "true")
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout test)

        def log_message(self, *args):
            pass

    return Handler
