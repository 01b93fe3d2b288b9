"""The "Support leads" group: what support agents may do, and deciding refunds over a
limit (approve or reject, never their own)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "Support leads"
PERMISSIONS = [
    ("ledger_app", "view_charge"),
    ("ledger_app", "refund_charge"),
    ("ledger_app", "view_refund"),
    ("ledger_app", "view_refundattention"),
    ("ledger_app", "view_refundapproval"),
    ("ledger_app", "approve_refund"),
    ("ledger_app", "view_ledgerentry"),
    ("ledger_app", "view_idempotencyrecord"),
    ("ledger_app", "view_refundlimit"),
]
AGENTS = "Support agents"
AGENTS_SEE = [("ledger_app", "view_refundapproval")]


def create_group(apps, schema_editor):
    # Permissions are normally made after migrations; make them now so the group gets them.
    app_config = apps.get_app_config("ledger_app")
    app_config.models_module = True  # migration state apps lack it; the helper checks it
    create_permissions(app_config, verbosity=0, apps=apps)
    app_config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")

    def grant(group, permissions):
        for app_label, codename in permissions:
            group.permissions.add(
                permission_model.objects.get(content_type__app_label=app_label, codename=codename)
            )

    grant(group_model.objects.get_or_create(name=GROUP)[0], PERMISSIONS)
    agents = group_model.objects.filter(name=AGENTS).first()
    if agents is not None:  # agents see what waits for approval (their own included)
        grant(agents, AGENTS_SEE)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0014_refund_limits_and_approval")]

    operations = [migrations.RunPython(create_group, remove_group)]
