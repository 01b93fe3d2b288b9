"""The payment provider port. Gateways are the only code that talks to the provider.

An answer is either the provider's own word (succeeded, or declined with a reason) or an
`OutcomeUnknown` exception: a timeout, a dropped connection, a 5xx, anything after which
the provider may or may not have done the work. Callers must never read it as a decline.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypedDict, Unpack

Verdict = Literal["succeeded", "declined"]
# What sync_provider walks: the provider's objects of each kind (ledger_app/mirror/sync.py).
Listed = Literal["charge", "refund", "dispute", "balance_transaction", "payout"]


class OutcomeUnknown(Exception):
    """The provider may or may not have applied the request."""


class GatewayTimeout(OutcomeUnknown):
    pass


class GatewayUnavailable(OutcomeUnknown):
    pass


class IdempotencyKeyConflict(OutcomeUnknown):
    """Same key, other parameters: the first request may have been applied, so not a 'no'."""


@dataclass(frozen=True)
class ProviderAnswer:
    """The provider's own word on a refund or a capture. `reference`: a succeeded card
    refund's acquirer reference number (ARN), once the card network has given it (some
    time after the refund succeeded); empty before, and for anything else. Adapters pass
    what the provider said through `ledger_app.provider.card_references`."""

    verdict: Verdict
    provider_id: str = ""
    decline_reason: str = ""
    reference: str = ""


class RefundParams(TypedDict):
    """What a refund asks of the provider: the port's parameters, declared once."""

    provider_key: str
    charge_reference: str
    amount: int
    currency: str
    metadata: dict[str, str]
    timeout: float


class RefundLookupParams(TypedDict):
    provider_key: str
    charge_reference: str
    ledger_refund_id: str


class ChargeParams(TypedDict):
    provider_key: str
    amount: int
    currency: str
    description: str
    metadata: dict[str, str]
    timeout: float


class ChargeLookupParams(TypedDict):
    provider_key: str
    ledger_charge_id: str


class Gateway(abc.ABC):
    """Every method takes its parameters by keyword, as its TypedDict above names them."""

    @abc.abstractmethod
    def refund(self, **request: Unpack[RefundParams]) -> ProviderAnswer:
        """Refund once per `provider_key`: the same key again returns the first answer."""

    @abc.abstractmethod
    def lookup_refund(self, **request: Unpack[RefundLookupParams]) -> ProviderAnswer | None:
        """The provider's record of that refund; None when it has none (never applied).
        Raises OutcomeUnknown when it cannot say right now."""

    @abc.abstractmethod
    def charge(self, **request: Unpack[ChargeParams]) -> ProviderAnswer:
        """Capture once per `provider_key`: the same key again returns the first answer."""

    @abc.abstractmethod
    def lookup_charge(self, **request: Unpack[ChargeLookupParams]) -> ProviderAnswer | None:
        """Like lookup_refund, for charges."""

    @abc.abstractmethod
    def list_created(self, kind: Listed, *, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Every object of `kind` the provider made from `start` (included) to `end` (not),
        each as its API describes it (Stripe's shape, plain JSON), in any order. Raises
        OutcomeUnknown when it cannot say right now."""

    @abc.abstractmethod
    def list_paid_out(self, payout_id: str) -> list[dict[str, Any]]:
        """The balance transactions the provider paid out in that payout (its own payout
        transaction included), as its API describes them. Raises OutcomeUnknown when it
        cannot say right now."""
