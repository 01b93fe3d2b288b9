"""The Stripe adapter: refunds and charges through the official `stripe` package.

Every create carries the caller's `provider_key` as its Idempotency-Key, on every attempt,
so Stripe makes at most one refund (or charge) of it however often it is sent. The client
never retries by itself (max_network_retries=0): the worker and the reconciler retry with
the same key. Each call has its own timeout (one client is kept per timeout value).

How Stripe's answers map onto the port (only Stripe's own "no" is a decline):

| Stripe answer                                   | port answer                          |
|-------------------------------------------------|--------------------------------------|
| object status `succeeded`                       | succeeded                            |
| refund `failed` / `canceled`, charge `failed`   | declined (failure reason or status)  |
| status `pending` / `requires_action` / other    | OutcomeUnknown (still processing)    |
| CardError (402)                                 | declined, reason = error code        |
| InvalidRequestError (400/404)                   | declined, reason = error code        |
| IdempotencyError (same key, other params)       | OutcomeUnknown: the first may apply  |
| APIConnectionError, timed out                   | GatewayTimeout                       |
| APIConnectionError, other (refused, reset...)   | GatewayUnavailable                   |
| APIError (5xx, 409 key in use), RateLimitError, | GatewayUnavailable                   |
| AuthenticationError, PermissionError, any other |                                      |
| StripeError                                     |                                      |

A succeeded refund's answer carries its `destination_details.card.reference` (the ARN),
when Stripe has it and it passes `card_references.card_reference`; else none.

Lookups (the reconciler's questions) list the charge's refunds, or search charges, by the
ledger id in their metadata. No match is None: Stripe never applied it. Any error at all,
including a 400/404, raises OutcomeUnknown: a lookup never concludes "not applied" from a
failure to ask. Charge search is eventually consistent on Stripe's side (new charges can
take a while to appear), so a None for a very recent charge leads to a resend with the same
key, which Stripe answers from its idempotency store (kept at least 24 hours).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any, Unpack, cast

import requests
import stripe

from ledger_app.provider.card_references import card_reference
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

log = logging.getLogger("ledger_app.provider.gateways.stripe")

TEST_SOURCE = "tok_visa"  # Stripe's test card token, when the charge names no source
LOOKUP_TIMEOUT_SECONDS = 10.0
# The stripe package's service of each kind sync_provider walks.
LISTS = {
    "charge": "charges",
    "refund": "refunds",
    "dispute": "disputes",
    "balance_transaction": "balance_transactions",
    "payout": "payouts",
}
SUCCEEDED = {"succeeded"}
REFUND_DECLINED = {"failed", "canceled"}
CHARGE_DECLINED = {"failed"}


class StripeGateway(Gateway):
    page_size = 100  # refunds per page when listing a charge's refunds

    def __init__(self, *, api_key: str, api_base: str | None = None) -> None:
        self._api_key = api_key
        self._api_base = api_base or stripe.DEFAULT_API_BASE
        self._clients: dict[float, stripe.StripeClient] = {}
        self._lock = threading.Lock()

    # --- refunds -----------------------------------------------------------------------

    def refund(self, **request: Unpack[RefundParams]) -> ProviderAnswer:
        params: dict[str, Any] = {
            "charge": request["charge_reference"],
            "amount": request["amount"],
            "metadata": _metadata(request["metadata"]),
        }
        service = self._client(request["timeout"]).v1.refunds
        return self._create(service, params, request["provider_key"], _refund_answer, "refund")

    def lookup_refund(self, **request: Unpack[RefundLookupParams]) -> ProviderAnswer | None:
        charge_reference = request["charge_reference"]
        ledger_refund_id = request["ledger_refund_id"]

        def matches() -> list[Any]:
            refunds = self._client(LOOKUP_TIMEOUT_SECONDS).v1.refunds.list(
                params={"charge": charge_reference, "limit": self.page_size}
            )
            return [
                refund
                for refund in refunds.auto_paging_iter()
                if _ledger_id(refund, "ledger_refund_id") == ledger_refund_id
            ]

        found = self._lookup(matches, f"refund {ledger_refund_id}")
        return _refund_answer(found) if found is not None else None

    # --- charges -----------------------------------------------------------------------

    def charge(self, **request: Unpack[ChargeParams]) -> ProviderAnswer:
        metadata = dict(request["metadata"])
        source = metadata.pop("source", None) or TEST_SOURCE
        params = {
            "amount": request["amount"],
            "currency": request["currency"].lower(),
            "description": request["description"] or None,  # None is left out of the request
            "metadata": _metadata(metadata),
            "source": source,
        }
        service = self._client(request["timeout"]).v1.charges
        return self._create(service, params, request["provider_key"], _charge_answer, "charge")

    def lookup_charge(self, **request: Unpack[ChargeLookupParams]) -> ProviderAnswer | None:
        ledger_charge_id = request["ledger_charge_id"]

        def matches() -> list[Any]:
            value = ledger_charge_id.replace("\\", "\\\\").replace("'", "\\'")
            result = self._client(LOOKUP_TIMEOUT_SECONDS).v1.charges.search(
                params={"query": f"metadata['ledger_charge_id']:'{value}'", "limit": 100}
            )
            return [
                charge
                for charge in result.auto_paging_iter()
                if _ledger_id(charge, "ledger_charge_id") == ledger_charge_id
            ]

        found = self._lookup(matches, f"charge {ledger_charge_id}")
        return _charge_answer(found) if found is not None else None

    # --- what sync_provider walks -------------------------------------------------------

    def list_created(self, kind: Listed, *, start: datetime, end: datetime) -> list[dict[str, Any]]:
        service = LISTS[kind]
        created = {"gte": int(start.timestamp()), "lt": int(end.timestamp())}
        return self._list(service, {"created": created})

    def list_paid_out(self, payout_id: str) -> list[dict[str, Any]]:
        return self._list("balance_transactions", {"payout": payout_id})

    def _list(self, service: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            listed = getattr(self._client(LOOKUP_TIMEOUT_SECONDS).v1, service).list(
                params={**params, "limit": self.page_size}
            )
            return [found.to_dict() for found in listed.auto_paging_iter()]
        except stripe.StripeError as exc:
            raise _unknown(exc, f"the list of {service}") from exc

    # --- plumbing ----------------------------------------------------------------------

    def _client(self, timeout: float) -> stripe.StripeClient:
        with self._lock:
            client = self._clients.get(timeout)
            if client is None:
                client = stripe.StripeClient(
                    self._api_key,
                    base_addresses={"api": self._api_base},
                    http_client=stripe.RequestsClient(timeout=timeout),
                    max_network_retries=0,
                )
                self._clients[timeout] = client
            return client

    @staticmethod
    def _create(
        service: Any,
        params: dict[str, Any],
        provider_key: str,
        answer: Callable[[Any], ProviderAnswer],
        what: str,
    ) -> ProviderAnswer:
        """Create under the provider key. Stripe's own refusal (a card or request error) is
        a decline; any other error leaves the outcome unknown."""
        try:
            created = service.create(params=params, options={"idempotency_key": provider_key})
        except (stripe.CardError, stripe.InvalidRequestError) as exc:
            # A declined capture names the failed charge Stripe made; a refund has none.
            failed = (getattr(exc.error, "charge", None) or "") if what == "charge" else ""
            return ProviderAnswer("declined", failed, _reason(exc))
        except stripe.StripeError as exc:
            raise _unknown(exc, f"{what} {provider_key}") from exc
        return answer(created)

    def _lookup(self, matches: Callable[[], list[Any]], what: str) -> Any | None:
        try:
            found = matches()
        except stripe.StripeError as exc:
            raise _unknown(exc, f"lookup of {what}") from exc
        if len(found) > 1:
            log.error("Stripe holds %d objects for %s: %s", len(found), what, _ids(found))
            # Report the one that moved money if any did, else one still in flight.
            found.sort(key=lambda obj: (_field(obj, "status") != "succeeded", _final(obj)))
        return found[0] if found else None


def _metadata(metadata: dict[str, Any]) -> dict[str, str]:
    """Stripe metadata values are strings."""
    return {
        str(key): value if isinstance(value, str) else json.dumps(value)
        for key, value in metadata.items()
    }


def _field(obj: Any, name: str) -> Any:
    """A field of a StripeObject (not a dict: it has no .get), None when absent."""
    return obj[name] if obj is not None and name in obj else None


def _ledger_id(obj: Any, key: str) -> str | None:
    return cast("str | None", _field(_field(obj, "metadata"), key))


def _final(obj: Any) -> bool:
    return _field(obj, "status") in SUCCEEDED | REFUND_DECLINED


def _ids(objects: Iterable[Any]) -> str:
    return ", ".join(_field(obj, "id") or "?" for obj in objects)


def _reason(exc: stripe.StripeError) -> str:
    return exc.code or getattr(exc.error, "type", None) or type(exc).__name__


def _answer(obj: Any, what: str, declined: set[str], reason_field: str) -> ProviderAnswer:
    """A Stripe refund or charge as the provider's word; still in flight: unknown."""
    status = _field(obj, "status")
    if status in SUCCEEDED:
        return ProviderAnswer("succeeded", obj.id)
    if status in declined:
        return ProviderAnswer("declined", obj.id, _field(obj, reason_field) or status)
    raise OutcomeUnknown(f"Stripe {what} {obj.id} is {status}; ask again later")


def _refund_answer(refund: Any) -> ProviderAnswer:
    answer = _answer(refund, "refund", REFUND_DECLINED, "failure_reason")
    if answer.verdict != "succeeded":
        return answer
    return replace(answer, reference=_destination_reference(refund))


def _destination_reference(refund: Any) -> str:
    """The refund's card reference (ARN), guarded; "" when Stripe gives none."""
    details = _field(refund, "destination_details")
    if isinstance(details, stripe.StripeObject):
        details = details.to_dict()  # plain JSON, as the guard reads it
    return card_reference(details)


def _charge_answer(charge: Any) -> ProviderAnswer:
    return _answer(charge, "charge", CHARGE_DECLINED, "failure_code")


def _unknown(exc: stripe.StripeError, what: str) -> OutcomeUnknown:
    """Every Stripe error that is not its own 'no': the outcome is unknown."""
    message = " ".join(str(exc.user_message or exc).split())
    detail = f"Stripe {type(exc).__name__} for {what}: {message}"
    if isinstance(exc, stripe.IdempotencyError):
        log.error("idempotency key reused with other parameters: %s", detail)
        return IdempotencyKeyConflict(detail)
    if isinstance(exc, stripe.APIConnectionError):
        if isinstance(exc.__cause__, requests.exceptions.Timeout):
            return GatewayTimeout(detail)
        return GatewayUnavailable(detail)
    if exc.http_status:
        detail = f"{detail} (HTTP {exc.http_status})"
    return GatewayUnavailable(detail)
