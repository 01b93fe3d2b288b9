"""Exporting admin lists as CSV is a permission of its own, per model (export_charge,
export_refund, export_ledgerentry): support agents and leads have all three."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUPS = ["Support agents", "Support leads"]
PERMISSIONS = [
    ("ledger_app", "export_charge"),
    ("ledger_app", "export_refund"),
    ("ledger_app", "export_ledgerentry"),
]


def grant(apps, schema_editor):
    # Permissions are normally made after migrations; make them now so the groups get them.
    app_config = apps.get_app_config("ledger_app")
    app_config.models_module = True  # migration state apps lack it; the helper checks it
    create_permissions(app_config, verbosity=0, apps=apps)
    app_config.models_module = None
    permission_model = apps.get_model("auth", "Permission")
    permissions = [
        permission_model.objects.get(content_type__app_label=app_label, codename=codename)
        for app_label, codename in PERMISSIONS
    ]
    for group in apps.get_model("auth", "Group").objects.filter(name__in=GROUPS):
        group.permissions.add(*permissions)


def revoke(apps, schema_editor):
    codenames = [codename for _, codename in PERMISSIONS]
    for group in apps.get_model("auth", "Group").objects.filter(name__in=GROUPS):
        group.permissions.remove(*group.permissions.filter(codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0015_support_leads_group")]

    operations = [
        migrations.AlterModelOptions(
            name="charge",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("refund_charge", "Can issue refunds on charges"),
                    ("export_charge", "Can export charges as CSV"),
                ],
            },
        ),
        migrations.AlterModelOptions(
            name="ledgerentry",
            options={
                "ordering": ["id"],
                "permissions": [("export_ledgerentry", "Can export ledger entries as CSV")],
                "verbose_name_plural": "ledger entries",
            },
        ),
        migrations.AlterModelOptions(
            name="refund",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("approve_refund", "Can approve or reject refunds over a limit"),
                    ("export_refund", "Can export refunds as CSV"),
                ],
            },
        ),
        migrations.RunPython(grant, revoke),
    ]
