"""Choosing the payment provider adapter (LEDGER_GATEWAY)."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from ledger_app.provider.gateways.base import Gateway
from ledger_app.provider.gateways.instrumented import InstrumentedGateway


def get_gateway() -> Gateway:
    return _build(settings.LEDGER_GATEWAY, settings.STRIPE_API_KEY, settings.STRIPE_API_BASE)


@cache
def _build(name: str, stripe_api_key: str, stripe_api_base: str) -> Gateway:
    # Timed and counted here, where every caller gets its gateway (ledger_app/metrics).
    return InstrumentedGateway(_adapter(name, stripe_api_key, stripe_api_base))


def _adapter(name: str, stripe_api_key: str, stripe_api_base: str) -> Gateway:
    if name == "stripe":
        from ledger_app.provider.gateways.stripe import StripeGateway

        return StripeGateway(api_key=stripe_api_key, api_base=stripe_api_base or None)
    from ledger_app.provider.gateways.simulated import SimulatedGateway

    return SimulatedGateway()
