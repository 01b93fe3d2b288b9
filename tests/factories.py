"""Test data built through the same services as production data."""

import factory

from ledger_app.charges.services import record_charge
from ledger_app.models import Charge


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


AGENTS_MIGRATION = "0006_support_agents_group"
LEADS_MIGRATION = "0015_support_leads_group"


def migration_group(migration: str):
    """The group a data migration makes ("Support agents", "Support leads"). Every test
    finds it, after a transactional test's flush too: tests/migration_data.py writes it
    again (serialized_rollback could not: a plain flush renumbers the content types)."""
    import importlib

    from django.contrib.auth.models import Group

    module = importlib.import_module(f"ledger_app.migrations.{migration}")
    return Group.objects.get(name=module.GROUP)
