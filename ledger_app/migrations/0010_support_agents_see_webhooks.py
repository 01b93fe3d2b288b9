"""Support agents may also see events, webhook endpoints (never their secrets) and
deliveries, and resend a delivery."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "Support agents"
PERMISSIONS = [
    "view_event",
    "view_webhookendpoint",
    "view_webhookdelivery",
    "resend_webhookdelivery",
]


def grant(apps, schema_editor):
    app_config = apps.get_app_config("ledger_app")
    app_config.models_module = True  # migration state apps lack it; the helper checks it
    create_permissions(app_config, verbosity=0, apps=apps)
    app_config.models_module = None
    group, _ = apps.get_model("auth", "Group").objects.get_or_create(name=GROUP)
    permission_model = apps.get_model("auth", "Permission")
    group.permissions.add(
        *permission_model.objects.filter(
            content_type__app_label="ledger_app", codename__in=PERMISSIONS
        )
    )


def revoke(apps, schema_editor):
    group = apps.get_model("auth", "Group").objects.filter(name=GROUP).first()
    if group is not None:
        group.permissions.remove(*group.permissions.filter(codename__in=PERMISSIONS))


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0009_events_and_webhooks")]

    operations = [migrations.RunPython(grant, revoke)]
