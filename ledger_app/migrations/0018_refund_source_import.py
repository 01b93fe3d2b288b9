"""Refunds made at the provider before their charge was imported get a source of their own,
`import` (a choice only: the stored values of other refunds do not change, no SQL)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0017_staff_time_zone_and_choice_labels")]

    operations = [
        migrations.AlterField(
            model_name="refund",
            name="source",
            field=models.CharField(
                choices=[
                    ("admin", "Admin"),
                    ("api", "API"),
                    ("cli", "Command line"),
                    ("bulk", "Bulk file"),
                    ("system", "System"),
                    ("import", "Charge import"),
                ],
                max_length=16,
            ),
        ),
    ]
