"""Idempotency keys: one table for every interface; the key, not the amount, makes a retry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from ledger_app.charges.models import Charge
from ledger_app.db import is_lock_timeout, lock_wait_budget, statement_cursor
from ledger_app.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReserved,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
)
from ledger_app.idempotency.models import IdempotencyRecord
from ledger_app.idempotency.selectors import idempotency_record, made_with
from ledger_app.refunds.models import Refund
from ledger_app.text import has_control_characters

T = TypeVar("T", Refund, Charge)

MAX_KEY_LENGTH = 255

# The namespaces the back office mints its own keys in, as `<namespace>:...`. A client's
# key in one of them could take a key minted later (an API refund keyed bulk:b7:1 made
# row 1 of `bulk_refund --batch-id b7` look changed), so clients may not use them.
ADMIN_FORM_KEYS = "admin"  # the admin refund form: admin:<32 hex>
ADMIN_BULK_KEYS = "admin-bulk"  # the admin's bulk refund: admin-bulk:<32 hex>:<charge id>
BULK_ROW_KEYS = "bulk"  # bulk_refund's rows without a key: bulk:<batch id>:<row number>
DEMO_KEYS = "demo"  # seed_demo's refunds: demo:<charge id>:<n>
RESERVED_KEY_PREFIXES = tuple(
    f"{namespace}:" for namespace in (ADMIN_FORM_KEYS, ADMIN_BULK_KEYS, BULK_ROW_KEYS, DEMO_KEYS)
)
REFUND_CREATE, CHARGE_CREATE = "refund.create", "charge.create"
# Keys belong to their owner, as Stripe scopes them to an account: an API key owns its
# own (under its label), and the back office one set for all its interfaces.
BACK_OFFICE = IdempotencyRecord.BACK_OFFICE
API_KEY_OWNERS = "api_key:"  # the label every API request's actor has (api/authentication.py)
CLAIM_SQL = f"""
    INSERT INTO {IdempotencyRecord._meta.db_table}
        (owner, key, operation, fingerprint, request_params, refund_id, charge_id, created_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (owner, key) DO NOTHING
    RETURNING id
"""  # noqa: S608 - the table name is our own constant


def owner_of(actor_label: str) -> str:
    """Who owns the keys of a request by `actor_label`: an API key its own (its label,
    `api_key:<prefix>`); everyone else (people in the admin, commands, bulk files) the
    back office, so that a file re-run by another operator replays."""
    return actor_label if actor_label.startswith(API_KEY_OWNERS) else BACK_OFFICE


@dataclass(frozen=True)
class IdempotentRequest:
    """A keyed request: the key, its owner, and a fingerprint of the request exactly as
    it was sent (the owner is not in it: it picks whose key it is)."""

    key: str
    operation: str
    params: dict[str, Any]
    fingerprint: str
    owner: str = BACK_OFFICE

    @classmethod
    def build(
        cls, *, key: object, operation: str, params: dict[str, Any], owner: str = BACK_OFFICE
    ) -> IdempotentRequest:
        canonical = json.dumps(
            {"operation": operation, "params": params},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return cls(
            key=validate_key(key),
            operation=operation,
            params=params,
            fingerprint=hashlib.sha256(canonical.encode()).hexdigest(),
            owner=owner,
        )


def keyed_request(
    key: object, operation: str, params: dict[str, Any], *, owner: str = BACK_OFFICE
) -> IdempotentRequest | None:
    """The keyed form of a request, or None when it was sent without a key (then nothing
    deduplicates it). `params` are the request as sent: an omitted field is None. The
    key is `owner`'s (owner_of): another owner's same key is another request."""
    if key is None:
        return None
    return IdempotentRequest.build(key=key, operation=operation, params=params, owner=owner)


def validate_key(key: object) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey()
    if has_control_characters(key):
        raise InvalidIdempotencyKey("Idempotency key must not contain control characters.")
    return key


def refuse_reserved_key(key: str) -> str:
    """Return a client's `key` unless it starts with a reserved prefix (in any case:
    BULK: is bulk:), which is refused with `idempotency_key_reserved` naming the prefix."""
    folded = key.lower()
    for prefix in RESERVED_KEY_PREFIXES:
        if folded.startswith(prefix):
            raise IdempotencyKeyReserved(
                f"Idempotency keys starting with {prefix!r} are reserved: the back office "
                f"makes its own keys there. Choose a key that does not start with any of "
                f"{', '.join(RESERVED_KEY_PREFIXES)} (in any case)."
            )
    return key


@dataclass(frozen=True)
class Created(Generic[T]):
    """What a create service returns: the refund or charge, and whether this request was
    a retry that replayed it (nothing was written) rather than the one that made it."""

    item: T
    replayed: bool


def create_once(
    keyed: IdempotentRequest | None, *, new_id: str, write: Callable[[], T]
) -> Created[T]:
    """The keyed-request flow both create_refund and create_charge run.

    With a key: the key comes first, before anything else. It is claimed for `new_id`
    (one INSERT ... ON CONFLICT DO NOTHING) inside the same transaction as `write`, so the
    key and what it made commit together or not at all. When the key is already bound,
    the claim inserts nothing and the request replays the holder's result (or is refused
    as a reuse) without writing; if the holder is still in flight, the claim waits for
    it. Most requests bring a new key, so there is no separate read of the key before
    the transaction: a retry costs a transaction that writes nothing instead.
    `write` makes the object with primary key `new_id`, or raises to refuse.
    """
    with lock_wait_budget(), transaction.atomic(durable=True):  # one budget for its waits
        replay = claim_or_replay(keyed, new_id=new_id)
        if replay is not None:
            return replay
        return Created(write(), replayed=False)


def claim_or_replay(keyed: IdempotentRequest | None, *, new_id: str) -> Created[Any] | None:
    """The key's step, first in a create's transaction (create_once's flow): None for a
    new request (its key, if any, now bound to `new_id`); else the replay of the request
    that bound the key first (`idempotency_key_reused` when this one differs)."""
    if keyed is None:
        return None
    holder = claim(keyed, new_id=new_id)
    return None if holder is None else _replay(holder, keyed)


def find_replay(keyed: IdempotentRequest) -> Created[Any] | None:
    """The earlier result this keyed request replays, None for a new key; a different
    request under a used key is refused (`idempotency_key_reused`)."""
    record = idempotency_record(keyed.key, keyed.owner)
    return None if record is None else _replay(record, keyed)


def find_legacy_replay(keyed: IdempotentRequest | None) -> Created[Any] | None:
    """For an API key's charge request: the charge a key made before keys had owners
    replays (or refuses a different request), whichever API key retries it. Migration 0029
    gave such keys the `legacy` owner where it could not tell which API key sent them; a
    client retrying a timed-out charge across the upgrade must not be charged twice."""
    if keyed is None or not keyed.owner.startswith(API_KEY_OWNERS):
        return None
    record = idempotency_record(keyed.key, IdempotencyRecord.LEGACY_CLIENT)
    return None if record is None else _replay(record, keyed)


def _replay(record: IdempotencyRecord, keyed: IdempotentRequest) -> Created[Any]:
    ensure_same_request(record, keyed)
    return Created(made_with(record), replayed=True)


def ensure_same_request(record: IdempotencyRecord, request: IdempotentRequest) -> None:
    """Same key and same fingerprint is a retry; same key and anything else is refused."""
    if record.operation != request.operation or record.fingerprint != request.fingerprint:
        raise IdempotencyKeyReused()


def claim(request: IdempotentRequest, *, new_id: str) -> IdempotencyRecord | None:
    """Bind the owner's key to the refund (or charge) about to be created, in the caller's
    transaction (another owner's same key is no conflict).

    Returns None when this request now owns the key, or the record that already held it.
    The unique constraint decides between concurrent requests: PostgreSQL makes the
    second insert wait for the first transaction; if that one commits, the insert fails
    and we read the winner's record; if it rolls back (a refusal), ours goes through.
    If the first is still running after the lock timeout: `idempotency_key_in_use`.
    That row does not exist yet: the foreign key is checked at commit (Django
    creates foreign keys DEFERRABLE INITIALLY DEFERRED), and a refusal rolls the
    record back with everything else, so a refused request binds nothing.
    """
    # One statement instead of savepoint + insert + release: this runs for every keyed
    # refund, and the round trips are most of its cost.
    try:
        with statement_cursor() as cursor:  # prepared once per connection on PostgreSQL
            cursor.execute(CLAIM_SQL, _claim_params(request, new_id))
            claimed = cursor.fetchone()
    except OperationalError as exc:
        if is_lock_timeout(exc):  # the first request with this key is still running
            raise IdempotencyKeyInUse() from exc
        raise
    if claimed is not None:
        return None
    record = idempotency_record(request.key, request.owner)
    if record is None:  # pragma: no cover - a conflict means a committed row
        raise IntegrityError(f"idempotency key {request.key!r} conflicted but is not there")
    return record


def _claim_params(request: IdempotentRequest, new_id: str) -> list[Any]:
    """CLAIM_SQL's values: the record, bound to the refund or the charge about to be made."""
    return [
        request.owner,
        request.key,
        request.operation,
        request.fingerprint,
        json.dumps(request.params, ensure_ascii=False),
        new_id if request.operation == REFUND_CREATE else None,
        new_id if request.operation == CHARGE_CREATE else None,
        timezone.now(),
    ]
