"""Every provider call timed and its failures counted, by operation: one wrapper around
whichever adapter LEDGER_GATEWAY chose (get_gateway), so no adapter carries metrics code."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar, Unpack

from ledger_app import metrics
from ledger_app.provider.gateways.base import (
    ChargeLookupParams,
    ChargeParams,
    Gateway,
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyConflict,
    Listed,
    OutcomeUnknown,
    ProviderAnswer,
    RefundLookupParams,
    RefundParams,
)

# Most specific first: the timeout, unavailable and key conflict are all OutcomeUnknown.
ERROR_NAMES: tuple[tuple[type[Exception], str], ...] = (
    (GatewayTimeout, "timeout"),
    (GatewayUnavailable, "unavailable"),
    (IdempotencyKeyConflict, "key_conflict"),
    (OutcomeUnknown, "outcome_unknown"),
    (Exception, "unexpected"),  # a bug or a library's own error: the send reads it as unknown
)


Answer = TypeVar("Answer", ProviderAnswer, ProviderAnswer | None, list[dict[str, Any]])


class InstrumentedGateway(Gateway):
    """The adapter, unchanged in what it answers or raises. Arguments pass through as given,
    so the port's signatures are declared once, in base.py."""

    def __init__(self, adapter: Gateway) -> None:
        self.adapter = adapter

    def refund(self, **request: Unpack[RefundParams]) -> ProviderAnswer:
        return _observed("refund", self.adapter.refund, request)

    def lookup_refund(self, **request: Unpack[RefundLookupParams]) -> ProviderAnswer | None:
        return _observed("lookup_refund", self.adapter.lookup_refund, request)

    def charge(self, **request: Unpack[ChargeParams]) -> ProviderAnswer:
        return _observed("charge", self.adapter.charge, request)

    def lookup_charge(self, **request: Unpack[ChargeLookupParams]) -> ProviderAnswer | None:
        return _observed("lookup_charge", self.adapter.lookup_charge, request)

    def list_created(self, kind: Listed, *, start: datetime, end: datetime) -> list[dict[str, Any]]:
        request = {"kind": kind, "start": start, "end": end}
        return _observed("list", self.adapter.list_created, request)

    def list_paid_out(self, payout_id: str) -> list[dict[str, Any]]:
        return _observed("list", self.adapter.list_paid_out, {"payout_id": payout_id})


def error_name(exc: Exception) -> str:
    return next(name for kind, name in ERROR_NAMES if isinstance(exc, kind))


def _observed(operation: str, call: Callable[..., Answer], request: Mapping[str, Any]) -> Answer:
    started = time.perf_counter()
    error = None
    try:
        return call(**request)
    except Exception as exc:
        error = error_name(exc)
        raise
    finally:
        metrics.observe_provider_call(operation, time.perf_counter() - started, error)
