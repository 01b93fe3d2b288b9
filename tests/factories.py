"""Test data built through the same services as production data."""

import factory

from ledger_app.models import Charge
from ledger_app.services.charges import record_charge


class ChargeFactory(factory.Factory):
    class Meta:
        model = Charge

    amount = 10_000
    currency = "usd"
    status = Charge.Status.SUCCEEDED
    description = factory.Sequence(lambda n: f"Order {n}")

    @classmethod
    def _create(cls, model_class, **kwargs):
        return record_charge(**kwargs)
