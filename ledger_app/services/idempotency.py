"""Idempotency keys: one table for every interface; the key, not the amount, makes a retry."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, OperationalError, connection
from django.utils import timezone

from ledger_app.errors import IdempotencyKeyInUse, IdempotencyKeyReused, InvalidIdempotencyKey
from ledger_app.models import IdempotencyRecord
from ledger_app.services.locks import is_lock_timeout
from ledger_app.services.text import has_control_characters

MAX_KEY_LENGTH = 255
CLAIM_SQL = f"""
    INSERT INTO {IdempotencyRecord._meta.db_table}
        (key, operation, fingerprint, request_params, refund_id, charge_id, created_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (key) DO NOTHING
    RETURNING id
"""  # noqa: S608 - the table name is our own constant


@dataclass(frozen=True)
class IdempotentRequest:
    """A keyed request: the key plus a fingerprint of the request exactly as it was sent."""

    key: str
    operation: str
    params: dict[str, Any]
    fingerprint: str

    @classmethod
    def build(cls, *, key: object, operation: str, params: dict[str, Any]) -> IdempotentRequest:
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
        )


def validate_key(key: object) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey()
    if has_control_characters(key):
        raise InvalidIdempotencyKey("Idempotency key must not contain control characters.")
    return key


def find(key: str) -> IdempotencyRecord | None:
    """The record for this key, if any. Most keys are new, so this asks for no more than
    the comparison needs; a replay then loads its refund or charge."""
    return (
        IdempotencyRecord.objects.filter(key=key)
        .only("key", "operation", "fingerprint", "refund_id", "charge_id")
        .order_by()
        .first()
    )


def ensure_same_request(record: IdempotencyRecord, request: IdempotentRequest) -> None:
    """Same key and same fingerprint is a retry; same key and anything else is refused."""
    if record.operation != request.operation or record.fingerprint != request.fingerprint:
        raise IdempotencyKeyReused()


def claim(
    request: IdempotentRequest, *, refund_id: str | None = None, charge_id: str | None = None
) -> IdempotencyRecord | None:
    """Bind the key to the refund (or charge) about to be created, in the caller's transaction.

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
        with connection.cursor() as cursor:
            cursor.execute(
                CLAIM_SQL,
                [
                    request.key,
                    request.operation,
                    request.fingerprint,
                    json.dumps(request.params, ensure_ascii=False),
                    refund_id,
                    charge_id,
                    timezone.now(),
                ],
            )
            claimed = cursor.fetchone()
    except OperationalError as exc:
        if is_lock_timeout(exc):  # the first request with this key is still running
            raise IdempotencyKeyInUse() from exc
        raise
    if claimed is not None:
        return None
    record = find(request.key)
    if record is None:  # pragma: no cover - a conflict means a committed row
        raise IntegrityError(f"idempotency key {request.key!r} conflicted but is not there")
    return record
