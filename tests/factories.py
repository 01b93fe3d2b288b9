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
    """The group a data migration makes ("Support agents", "Support leads"), made again from
    the migration's own list when an earlier transactional test has flushed it away
    (flushing keeps no migration data; serialized_rollback cannot bring it back once a
    plain flush has renumbered the content types)."""
    import importlib

    from django.contrib.auth.models import Group, Permission

    module = importlib.import_module(f"ledger_app.migrations.{migration}")
    group, created = Group.objects.get_or_create(name=module.GROUP)
    if created:
        group.permissions.set(
            [
                Permission.objects.get(content_type__app_label=app, codename=codename)
                for app, codename in module.PERMISSIONS
            ]
        )
    return group
