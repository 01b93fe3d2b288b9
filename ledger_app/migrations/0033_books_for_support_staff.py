"""The books against the provider for support staff: agents and leads may look at each day's
close, its differences, and the provider's balance transactions and payouts; leads alone
may explain a difference (ledger_app.explain_booksdifference), as they alone approve
refunds over a limit."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUPS = ["Support agents", "Support leads"]
SEE = [
    ("ledger_app", "view_booksday"),
    ("ledger_app", "view_booksdifference"),
    ("ledger_app", "view_balancetransaction"),
    ("ledger_app", "view_payout"),
]
LEADS = "Support leads"
LEADS_EXPLAIN = [("ledger_app", "explain_booksdifference")]


def grant(apps, schema_editor):
    # Permissions are normally made after migrations; make them now so the groups get them.
    app_config = apps.get_app_config("ledger_app")
    app_config.models_module = True  # migration state apps lack it; the helper checks it
    create_permissions(app_config, verbosity=0, apps=apps)
    app_config.models_module = None
    permission_model = apps.get_model("auth", "Permission")

    def permissions(pairs):
        return [
            permission_model.objects.get(content_type__app_label=app_label, codename=codename)
            for app_label, codename in pairs
        ]

    for group in apps.get_model("auth", "Group").objects.filter(name__in=GROUPS):
        group.permissions.add(*permissions(SEE))
        if group.name == LEADS:
            group.permissions.add(*permissions(LEADS_EXPLAIN))


def revoke(apps, schema_editor):
    codenames = [codename for _, codename in SEE + LEADS_EXPLAIN]
    for group in apps.get_model("auth", "Group").objects.filter(name__in=GROUPS):
        group.permissions.remove(*group.permissions.filter(codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0032_books_against_the_provider")]

    operations = [migrations.RunPython(grant, revoke)]
