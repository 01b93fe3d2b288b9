"""The "Support agents" group: may see the ledger and issue refunds, nothing else."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "Support agents"
PERMISSIONS = [
    ("ledger_app", "view_charge"),
    ("ledger_app", "refund_charge"),
    ("ledger_app", "view_refund"),
    ("ledger_app", "view_refundattention"),
    ("ledger_app", "view_ledgerentry"),
    ("ledger_app", "view_idempotencyrecord"),
    ("simulated_provider", "view_providerrefund"),
    ("simulated_provider", "view_providercharge"),
    ("simulated_provider", "view_providerrequest"),
]


def create_group(apps, schema_editor):
    # Permissions are normally made after migrations; make them now so the group gets them.
    for app_label in ("ledger_app", "simulated_provider"):
        app_config = apps.get_app_config(app_label)
        app_config.models_module = True  # migration state apps lack it; the helper checks it
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    group, _ = group_model.objects.get_or_create(name=GROUP)
    for app_label, codename in PERMISSIONS:
        group.permissions.add(
            permission_model.objects.get(content_type__app_label=app_label, codename=codename)
        )


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger_app", "0005_admin_indexes_and_attention"),
        ("simulated_provider", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
