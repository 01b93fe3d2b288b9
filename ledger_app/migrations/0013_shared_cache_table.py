"""The table behind CACHES["shared"] (counters every process and machine shares, such as
failed API authentications per address), made by `migrate` so no deploy can forget it.
It is Django's own `createcachetable`, which skips a table that exists."""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


def drop_cache_table(apps, schema_editor):
    schema_editor.execute("DROP TABLE IF EXISTS shared_cache")


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0012_audit_rows_protect_their_users")]

    operations = [migrations.RunPython(create_cache_table, drop_cache_table, elidable=False)]
