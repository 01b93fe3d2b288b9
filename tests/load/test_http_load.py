"""Load: many HTTP clients against a real gunicorn, then the books must still agree.

A gunicorn subprocess serves the pytest PostgreSQL test database on a free loopback port.
`CLIENTS` threads, each with its own requests.Session and seeded random.Random, send
`OPERATIONS` mixed requests: refunds with fresh keys on a few HOT charges that every
client refunds at once and on COLD charges that each belong to one client (so that client
knows exactly what is left on them), exact replays, the same key with other parameters,
over-refunds, refunds of emptied charges, omitted amounts, keyless refunds, corrected
retries, new charges, and reads. Every response is checked as it arrives; at the end
every refund a client was told about must be in the database with its amount, nothing
else may be, and the ledger invariants and verify_ledger must hold.

Sizes come from tests.tally.scale, so `make soak` (LEDGER_SOAK=1) enlarges them, or
LEDGER_LOAD_OPERATIONS / LEDGER_LOAD_CLIENTS set them. LEDGER_LOAD_SEED changes the seed.
Nothing here asserts on speed; the run prints its figures.
"""

from __future__ import annotations

import io
import os
import random
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest
import requests
from django.core.management import call_command

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Charge, Refund
from tests import tally
from tests.factories import ChargeFactory
from tests.invariants import assert_ledger_invariants, assert_provider_agrees
from tests.processes import GunicornServer

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

OPERATIONS = tally.scale("load_operations", 1_500, 50_000)
CLIENTS = tally.scale("load_clients", 32, 64)
# A guard against hanging, far above what the CI size needs; never a speed assertion.
WALL_CLOCK_LIMIT = tally.scale("load_seconds", 300, 3_000)
SEED = int(os.environ.get("LEDGER_LOAD_SEED", "20251130"))
REQUEST_TIMEOUT = 30
HOT_CHARGES = 4
# Enough that hot charges run dry about half way through and refusals follow.
HOT_AMOUNT = max(250_000, OPERATIONS * 50)
COLD_CHARGES = max(300, OPERATIONS // 16)
COLD_AMOUNT = 10_000
# gthread: each worker process serves THREADS requests at once and keeps idle
# keep-alive connections in its poller, so 32 sessions need no thread each.
# 3 x 8 = 24 database connections at most (CONN_MAX_AGE keeps them), far under 100.
WORKERS = 3
THREADS = 8
MAX_409_RETRIES = 5

WEIGHTS = {
    "hot_create": 22,
    "cold_create": 14,
    "cold_rest": 3,
    "keyless_cold": 2,
    "replay": 12,
    "key_reused": 5,
    "over_refund": 5,
    "corrected_retry": 2,
    "refund_emptied": 3,
    "get_refund": 9,
    "get_charge": 10,
    "list_refunds": 4,
    "list_refunds_paged": 1,
    "list_charge_refunds": 3,
    "list_charges": 3,
    "charge_create": 1.5,
    "charge_replay": 0.5,
}


# --- the server -------------------------------------------------------------------------


@pytest.fixture
def server(transactional_db, tmp_path):
    srv = GunicornServer(
        tmp_path,
        workers=WORKERS,
        threads=THREADS,
        DATABASE_CONN_MAX_AGE="60",
        REFUND_DISPATCH="inline",
        LOG_LEVEL="ERROR",  # 4xx warnings would flood the log; errors still show
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


# --- what the clients share ---------------------------------------------------------------


@dataclass
class Keyed:
    """A keyed create that succeeded: replaying `body` under `key` must give `object_id`."""

    path: str
    key: str
    body: dict
    object_id: str
    amount: int


@dataclass
class Shared:
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    latencies: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    connection_errors: list = field(default_factory=list)
    keyed_refunds: list = field(default_factory=list)
    keyed_charges: list = field(default_factory=list)
    # Every refund a client was told was made (2xx, not a replay): id -> (charge, amount).
    told: dict = field(default_factory=dict)
    told_ids: list = field(default_factory=list)  # the same ids, to pick from
    told_per_charge: Counter = field(default_factory=Counter)
    emptied: list = field(default_factory=list)  # hot charges a "the rest" refund emptied
    replays_checked: int = 0
    checks: int = 0
    operations: int = 0

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)

    def check(self, condition: bool, message: str) -> bool:
        with self.lock:
            self.checks += 1
            if not condition:
                self.failures.append(message)
        return condition


@dataclass(frozen=True)
class Load:
    """What every client shares: the server, the API key, the hot charges, the tally and
    the deadline."""

    base_url: str
    api_key: str
    shared: Shared
    hot: list[tuple[str, int]]  # [(id, amount)]
    deadline: float


class Client:
    """One thread's client: a session, its own random stream, the cold charges it owns."""

    def __init__(self, index: int, budget: int, cold: list[tuple[str, int]], load: Load):
        self.index = index
        self.budget = budget
        self.base_url = load.base_url
        self.shared = load.shared
        self.hot = load.hot
        # Owned cold charges: id -> [amount, refunded]; only this client refunds them.
        self.owned = {charge_id: [amount, 0] for charge_id, amount in cold}
        self.owned_refunds: dict[str, set] = defaultdict(set)
        self.deadline = load.deadline
        self.rng = random.Random(SEED * 1_000 + index)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {load.api_key}"
        self.sequence = 0
        self.done = 0

    # requests -----------------------------------------------------------------------

    def fresh_key(self) -> str:
        self.sequence += 1
        return f"load-{SEED}-{self.index}-{self.sequence}"

    def send(self, method: str, path: str, *, key=None, data=None, params=None):
        headers = {"Idempotency-Key": key} if key is not None else {}
        for attempt in range(MAX_409_RETRIES + 1):
            started = time.perf_counter()
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=REQUEST_TIMEOUT,
                )
            except requests.RequestException as exc:
                with self.shared.lock:
                    self.shared.connection_errors.append(f"{method} {path}: {exc!r}")
                return None
            elapsed = time.perf_counter() - started
            with self.shared.lock:
                self.shared.statuses[response.status_code] += 1
                self.shared.latencies.append(elapsed)
            if response.status_code >= 500:
                self.shared.fail(f"{method} {path} {data}: {response.status_code} {response.text}")
                return None
            # 409: a lock or the key is busy; the documented answer is the same key again.
            if response.status_code != 409 or method != "POST" or key is None:
                return response
            time.sleep(0.05 * (attempt + 1))
        return response

    def refund(self, body: dict, key=None):
        return self.send("POST", "/v1/refunds", key=key, data=body)

    # outcome checks -----------------------------------------------------------------

    def expect_made(self, response, body, key, *, charge_id, amount) -> dict | None:
        """A new refund: record what the client was told, and (keyed) keep it to replay."""
        s = self.shared
        if response is None:
            return None
        if not s.check(
            response.status_code == 200 and "Idempotent-Replayed" not in response.headers,
            f"refund {body} key={key}: expected a new refund, got "
            f"{response.status_code} {response.headers.get('Idempotent-Replayed')} "
            f"{response.text}",
        ):
            return None
        refund = response.json()
        s.check(
            refund["charge"] == charge_id
            and refund["amount"] == amount
            and refund["status"] == "succeeded",
            f"refund {body}: answered {refund}",
        )
        with s.lock:
            s.told[refund["id"]] = (charge_id, refund["amount"])
            s.told_ids.append(refund["id"])
            s.told_per_charge[charge_id] += refund["amount"]
            s.outcomes["refund_made"] += 1
            if key is not None:
                s.keyed_refunds.append(Keyed("/v1/refunds", key, body, refund["id"], amount))
        return refund

    def expect_refused(self, response, body, codes: set, *, type_="invalid_request_error"):
        s = self.shared
        if response is None:
            return None
        ok = response.status_code == 400
        error = response.json().get("error", {}) if ok else {}
        s.check(
            ok and error.get("code") in codes and error.get("type") == type_,
            f"refund {body}: expected 400 {type_} {sorted(codes)}, got "
            f"{response.status_code} {response.text}",
        )
        with s.lock:
            s.outcomes[f"refused_{error.get('code')}"] += 1
        return error.get("code")

    # owned cold charges -------------------------------------------------------------

    def owned_with_rest(self) -> str | None:
        left = [cid for cid, (amount, refunded) in self.owned.items() if refunded < amount]
        return self.rng.choice(left) if left else None

    def owned_emptied(self) -> str | None:
        empty = [cid for cid, (amount, refunded) in self.owned.items() if refunded == amount]
        return self.rng.choice(empty) if empty else None

    def note_owned_refund(self, charge_id: str, refund: dict | None) -> None:
        if refund is not None:
            self.owned[charge_id][1] += refund["amount"]
            self.owned_refunds[charge_id].add(refund["id"])

    # operations: each returns how many requests of the budget it used ---------------

    def op_hot_create(self) -> int:
        charge_id, amount = self.rng.choice(self.hot)
        late = self.done > self.budget * 0.9
        body = {"charge": charge_id}
        if not (late and self.rng.random() < 0.02):  # late on, sometimes "the rest"
            body["amount"] = str(self.rng.randint(100, 3_000))
        key = self.fresh_key()
        response = self.refund(body, key)
        if response is not None and response.status_code == 200:
            made = response.json()
            self.expect_made(
                response,
                body,
                key,
                charge_id=charge_id,
                amount=int(body["amount"]) if "amount" in body else made["amount"],
            )
            if "amount" not in body:  # "the rest": checked below, the charge must be empty
                with self.shared.lock:
                    self.shared.emptied.append(charge_id)
        else:
            self.expect_refused(response, body, {"amount_too_large", "charge_already_refunded"})
        return 1

    def op_cold_create(self, *, keyed=True) -> int:
        charge_id = self.owned_with_rest()
        if charge_id is None:
            return self.op_hot_create()
        amount, refunded = self.owned[charge_id]
        value = self.rng.randint(1, min(amount - refunded, 4_000))
        body = {"charge": charge_id, "amount": str(value)}
        if self.rng.random() < 0.3:
            body["reason"] = self.rng.choice(["duplicate", "requested_by_customer"])
        if self.rng.random() < 0.2:
            body["metadata[order]"] = f"o-{self.index}-{self.sequence}"
        key = self.fresh_key() if keyed else None
        response = self.refund(body, key)
        made = self.expect_made(response, body, key, charge_id=charge_id, amount=value)
        self.note_owned_refund(charge_id, made)
        return 1

    def op_keyless_cold(self) -> int:
        return self.op_cold_create(keyed=False)

    def op_cold_rest(self) -> int:
        charge_id = self.owned_with_rest()
        if charge_id is None:
            return self.op_hot_create()
        amount, refunded = self.owned[charge_id]
        body = {"charge": charge_id}
        key = self.fresh_key()
        made = self.expect_made(
            self.refund(body, key), body, key, charge_id=charge_id, amount=amount - refunded
        )
        self.note_owned_refund(charge_id, made)
        return 1

    def op_replay(self, kind="refund") -> int:
        with self.shared.lock:
            pool = self.shared.keyed_refunds if kind == "refund" else self.shared.keyed_charges
            original = self.rng.choice(pool) if pool else None
        if original is None:
            return self.op_cold_create()
        response = self.send("POST", original.path, key=original.key, data=original.body)
        if response is None:
            return 1
        answer = response.json()
        if self.shared.check(
            response.status_code == 200
            and response.headers.get("Idempotent-Replayed") == "true"
            and answer.get("id") == original.object_id
            and answer.get("amount") == original.amount,
            f"replay of {original}: {response.status_code} "
            f"{response.headers.get('Idempotent-Replayed')} {response.text}",
        ):
            with self.shared.lock:
                self.shared.replays_checked += 1
                self.shared.outcomes[f"{kind}_replayed"] += 1
        return 1

    def op_charge_replay(self) -> int:
        return self.op_replay("charge")

    def op_key_reused(self) -> int:
        with self.shared.lock:
            pool = self.shared.keyed_refunds
            original = self.rng.choice(pool) if pool else None
        if original is None:
            return self.op_cold_create()
        body = dict(original.body)
        change = self.rng.choice(["amount", "reason", "charge"])
        if change == "amount" and "amount" in body:
            body["amount"] = str(int(body["amount"]) + 1)
        elif change == "amount":
            body["amount"] = str(original.amount)  # explicit where the first omitted it
        elif change == "reason":
            body["reason"] = "fraudulent" if body.get("reason") != "fraudulent" else "duplicate"
        else:
            body["charge"] = self.rng.choice(self.hot)[0]
            if body["charge"] == original.body["charge"]:
                body["amount"] = str(int(body.get("amount", original.amount)) + 1)
        response = self.refund(body, original.key)
        self.expect_refused(response, body, {"idempotency_key_reused"}, type_="idempotency_error")
        return 1

    def op_over_refund(self) -> int:
        key = self.fresh_key()
        charge_id = self.owned_with_rest()
        if charge_id is None or self.rng.random() < 0.4:
            charge_id, amount = self.rng.choice(self.hot)
            body = {"charge": charge_id, "amount": str(amount + self.rng.randint(1, 1_000))}
            codes = {"amount_too_large", "charge_already_refunded"}
        else:
            amount, refunded = self.owned[charge_id]
            too_much = amount - refunded + self.rng.randint(1, 500)
            body = {"charge": charge_id, "amount": str(too_much)}
            codes = {"amount_too_large"}
        self.expect_refused(self.refund(body, key), body, codes)
        return 1

    def op_corrected_retry(self) -> int:
        """Refused for the balance, then the same key with a right amount does the work."""
        charge_id = self.owned_with_rest()
        if charge_id is None:
            return self.op_over_refund()
        amount, refunded = self.owned[charge_id]
        key = self.fresh_key()
        wrong = {"charge": charge_id, "amount": str(amount - refunded + 1)}
        if self.expect_refused(self.refund(wrong, key), wrong, {"amount_too_large"}) is None:
            return 1
        value = self.rng.randint(1, amount - refunded)
        right = {"charge": charge_id, "amount": str(value)}
        made = self.expect_made(
            self.refund(right, key), right, key, charge_id=charge_id, amount=value
        )
        self.note_owned_refund(charge_id, made)
        return 2

    def op_refund_emptied(self) -> int:
        charge_id = self.owned_emptied()
        if charge_id is None:
            return self.op_cold_rest()  # empties one, for next time
        body = {"charge": charge_id}
        if self.rng.random() < 0.7:
            body["amount"] = str(self.rng.randint(1, 5_000))
        self.expect_refused(self.refund(body, self.fresh_key()), body, {"charge_already_refunded"})
        return 1

    def op_get_refund(self) -> int:
        with self.shared.lock:
            refund_id = self.rng.choice(self.shared.told_ids) if self.shared.told_ids else None
            if refund_id is not None:
                charge_id, amount = self.shared.told[refund_id]
        if refund_id is None:
            return self.op_list_refunds()
        response = self.send("GET", f"/v1/refunds/{refund_id}")
        if response is not None and self.shared.check(
            response.status_code == 200, f"GET refund {refund_id}: {response.text}"
        ):
            body = response.json()
            self.shared.check(
                (body["id"], body["charge"], body["amount"]) == (refund_id, charge_id, amount),
                f"GET refund {refund_id}: {body} vs told {charge_id} {amount}",
            )
        return 1

    def op_get_charge(self) -> int:
        if self.owned and self.rng.random() < 0.6:
            charge_id = self.rng.choice(list(self.owned))
            expected = self.owned[charge_id][1]
            params = {"expand[]": "refunds"} if self.rng.random() < 0.2 else None
            response = self.send("GET", f"/v1/charges/{charge_id}", params=params)
            if response is not None and self.shared.check(
                response.status_code == 200, f"GET charge {charge_id}: {response.text}"
            ):
                # Only this client refunds it: the charge says exactly what it was told.
                self.shared.check(
                    response.json()["amount_refunded"] == expected,
                    f"owned charge {charge_id}: {response.text} vs told {expected}",
                )
            return 1
        charge_id, amount = self.rng.choice(self.hot)
        with self.shared.lock:
            told_before = self.shared.told_per_charge[charge_id]
        response = self.send("GET", f"/v1/charges/{charge_id}")
        if response is not None and self.shared.check(
            response.status_code == 200, f"GET charge {charge_id}: {response.text}"
        ):
            # Every refund told before this read was sent is in it, and never too much.
            refunded = response.json()["amount_refunded"]
            self.shared.check(
                told_before <= refunded <= amount,
                f"hot charge {charge_id}: amount_refunded {refunded}, told {told_before}",
            )
        return 1

    def op_list_refunds(self) -> int:
        limit = self.rng.randint(1, 100)
        response = self.send("GET", "/v1/refunds", params={"limit": limit})
        if response is not None and self.shared.check(
            response.status_code == 200, f"list refunds: {response.text}"
        ):
            body = response.json()
            self.shared.check(
                body["object"] == "list" and len(body["data"]) <= limit,
                f"list refunds limit={limit}: {len(body['data'])}",
            )
        return 1

    def op_list_refunds_paged(self) -> int:
        first = self.send("GET", "/v1/refunds", params={"limit": 20})
        if first is None or not self.shared.check(first.status_code == 200, first.text):
            return 1
        page = first.json()
        if not page["data"] or not page["has_more"]:
            return 1
        second = self.send(
            "GET", "/v1/refunds", params={"limit": 20, "starting_after": page["data"][-1]["id"]}
        )
        if second is not None and self.shared.check(second.status_code == 200, second.text):
            ids_1 = {r["id"] for r in page["data"]}
            ids_2 = {r["id"] for r in second.json()["data"]}
            self.shared.check(not ids_1 & ids_2, f"pages overlap: {ids_1 & ids_2}")
        return 2

    def op_list_charge_refunds(self) -> int:
        if not self.owned:
            return self.op_list_refunds()
        charge_id = self.rng.choice(list(self.owned))
        response = self.send("GET", "/v1/refunds", params={"charge": charge_id, "limit": 100})
        if response is not None and self.shared.check(
            response.status_code == 200, f"list refunds of {charge_id}: {response.text}"
        ):
            listed = {r["id"] for r in response.json()["data"]}
            known = self.owned_refunds[charge_id]
            if len(known) < 100:
                self.shared.check(
                    listed == known, f"refunds of {charge_id}: listed {listed}, told {known}"
                )
        return 1

    def op_list_charges(self) -> int:
        limit = self.rng.randint(1, 100)
        response = self.send("GET", "/v1/charges", params={"limit": limit})
        if response is not None and self.shared.check(
            response.status_code == 200, f"list charges: {response.text}"
        ):
            self.shared.check(len(response.json()["data"]) <= limit, "list charges too long")
        return 1

    def op_charge_create(self) -> int:
        amount = self.rng.randint(1_000, 20_000)
        body = {"amount": str(amount), "currency": "usd", "description": f"load {self.index}"}
        key = self.fresh_key()
        response = self.send("POST", "/v1/charges", key=key, data=body)
        if response is None or not self.shared.check(
            response.status_code == 200 and "Idempotent-Replayed" not in response.headers,
            f"create charge {body}: {response.status_code} {response.text}",
        ):
            return 1
        charge = response.json()
        if self.shared.check(
            charge["status"] == "succeeded" and charge["amount"] == amount,
            f"create charge {body}: {charge}",
        ):
            self.owned[charge["id"]] = [amount, 0]
            with self.shared.lock:
                self.shared.keyed_charges.append(
                    Keyed("/v1/charges", key, body, charge["id"], amount)
                )
                self.shared.outcomes["charge_made"] += 1
        return 1

    # the loop ---------------------------------------------------------------------

    def run(self) -> None:
        names = list(WEIGHTS)
        weights = [WEIGHTS[name] for name in names]
        try:
            while self.done < self.budget:
                if time.monotonic() > self.deadline:
                    self.shared.fail(f"client {self.index}: wall-clock limit reached")
                    return
                name = self.rng.choices(names, weights)[0]
                if name == "corrected_retry" and self.budget - self.done < 2:
                    name = "cold_create"
                if name == "list_refunds_paged" and self.budget - self.done < 2:
                    name = "list_refunds"
                self.done += getattr(self, f"op_{name}")()
        except Exception:
            self.shared.fail(f"client {self.index} crashed:\n{traceback.format_exc()}")
        finally:
            self.session.close()
            with self.shared.lock:
                self.shared.operations += self.done


def percentile(values: list, fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


# --- the test ------------------------------------------------------------------------------


def test_many_http_clients_mixed_load_keeps_the_books(server):
    api_key = create_api_key(name="load test")[1]
    hot = [
        (ChargeFactory(amount=HOT_AMOUNT, currency="usd").id, HOT_AMOUNT)
        for _ in range(HOT_CHARGES)
    ]
    cold = [
        (ChargeFactory(amount=COLD_AMOUNT, currency="usd").id, COLD_AMOUNT)
        for _ in range(COLD_CHARGES)
    ]
    shared = Shared()
    started = time.monotonic()
    deadline = started + WALL_CLOCK_LIMIT
    load = Load(server.url, api_key, shared, hot, deadline)
    clients = [
        Client(
            index,
            OPERATIONS // CLIENTS + (1 if index < OPERATIONS % CLIENTS else 0),
            cold[index::CLIENTS],
            load,
        )
        for index in range(CLIENTS)
    ]
    threads = [threading.Thread(target=c.run, name=f"load-{c.index}") for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(1.0, deadline + REQUEST_TIMEOUT - time.monotonic()))
    seconds = time.monotonic() - started
    hung = [t.name for t in threads if t.is_alive()]
    server.stop()
    log = server.log()

    statuses = dict(sorted(shared.statuses.items()))
    print(
        f"\nload: {shared.operations} ops, {CLIENTS} clients, {seconds:.1f} s, "
        f"{shared.operations / seconds:.0f} ops/s, "
        f"p50 {percentile(shared.latencies, 0.50) * 1000:.0f} ms, "
        f"p99 {percentile(shared.latencies, 0.99) * 1000:.0f} ms, statuses {statuses}, "
        f"outcomes {dict(sorted(shared.outcomes.items()))}"
    )

    assert hung == [], f"clients still running after {seconds:.0f}s: {hung}"
    assert shared.connection_errors == [], shared.connection_errors[:10]
    assert shared.failures == [], "\n".join(shared.failures[:20])
    assert not [code for code in statuses if code >= 500], statuses
    assert shared.operations == OPERATIONS
    assert "Traceback" not in log, log[-5_000:]
    assert "WORKER TIMEOUT" not in log, log[-5_000:]
    checks = shared.checks + 7

    # Every refund a client was told about is there, with its amount; nothing else is.
    refunds = {r.id: r for r in Refund.objects.all()}
    assert set(refunds) == set(shared.told), (
        f"in the database, never told: {sorted(set(refunds) - set(shared.told))[:10]}; "
        f"told, not in the database: {sorted(set(shared.told) - set(refunds))[:10]}"
    )
    for refund_id, (charge_id, amount) in shared.told.items():
        refund = refunds[refund_id]
        assert (refund.charge_id, refund.amount, refund.status) == (
            charge_id,
            amount,
            Refund.Status.SUCCEEDED,
        ), refund_id
    checks += 1 + len(shared.told)

    # Per charge: what clients were told was refunded is exactly amount_refunded, and
    # never more than the charge.
    for charge in Charge.objects.all():
        told = shared.told_per_charge.get(charge.id, 0)
        assert told <= charge.amount, charge.id
        assert charge.amount_refunded == told, (charge.id, charge.amount_refunded, told)
        checks += 2
    for charge_id, _ in hot:
        assert shared.told_per_charge[charge_id] > 0, f"hot charge {charge_id} never refunded"
        checks += 1
    for charge_id in shared.emptied:  # a refund of "the rest" left nothing
        charge = Charge.objects.get(pk=charge_id)
        assert charge.amount_refunded == charge.amount, charge_id
        checks += 1
    # The mix really exercised what it says (the load was not all refusals or all reads).
    assert shared.replays_checked > 0
    assert shared.outcomes["refused_amount_too_large"] > 0
    assert shared.outcomes["refused_charge_already_refunded"] > 0
    assert shared.outcomes["refused_idempotency_key_reused"] > 0
    checks += 4

    assert_ledger_invariants()
    assert_provider_agrees()
    out = io.StringIO()
    call_command("verify_ledger", stdout=out)  # raises CommandError on any drift
    assert "DRIFT" not in out.getvalue() and "the books agree" in out.getvalue(), out.getvalue()
    checks += 3

    tally.add("load", operations=shared.operations, invariant_checks=checks)
