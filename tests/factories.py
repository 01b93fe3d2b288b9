"""Test data built through the same services as production data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import factory

from ledger_app.charges.services import record_charge
from ledger_app.models import Charge

if TYPE_CHECKING:
    from django.contrib.auth.models import Group


class Charges(factory.Factory[Charge]):
    class Meta:
        model = Charge

    amount = 10_000
    currency = "usd"
    status = Charge.Status.SUCCEEDED
    description = factory.Sequence(lambda n: f"Order {n}")

    @classmethod
    def _create(cls, model_class: type[Charge], *args: Any, **kwargs: Any) -> Charge:
        return record_charge(**kwargs)


# ChargeFactory(amount=...) makes a charge as calling the factory class would (its strategy
# is create), but typed: to the type checker a factory class makes instances of itself.
ChargeFactory = Charges.create


AGENTS_MIGRATION = "0006_support_agents_group"
LEADS_MIGRATION = "0015_support_leads_group"


def migration_group(migration: str) -> Group:
    """The group a data migration makes ("Support agents", "Support leads"). Every test
    finds it, after a transactional test's flush too: tests/migration_data.py writes it
    again (serialized_rollback could not: a plain flush renumbers the content types)."""
    import importlib

    from django.contrib.auth.models import Group

    module = importlib.import_module(f"ledger_app.migrations.{migration}")
    return Group.objects.get(name=module.GROUP)
