"""Human labels for every choice (the stored values do not change: on PostgreSQL and SQLite
these AlterFields are no SQL at all), and each staff member's own time zone for the admin."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger_app", "0016_csv_export_permissions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="charge",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("unknown", "Unknown"),
                    ("awaiting_approval", "Awaiting approval"),
                    ("canceled", "Canceled"),
                ],
                default="pending",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="type",
            field=models.CharField(
                choices=[
                    ("charge.succeeded", "Charge succeeded"),
                    ("charge.failed", "Charge failed"),
                    ("charge.refunded", "Charge refunded"),
                    ("refund.created", "Refund created"),
                    ("refund.updated", "Refund updated"),
                    ("refund.failed", "Refund failed"),
                ],
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="idempotencyrecord",
            name="operation",
            field=models.CharField(
                choices=[
                    ("refund.create", "Create a refund"),
                    ("charge.create", "Create a charge"),
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="ledgerentry",
            name="kind",
            field=models.CharField(
                choices=[
                    ("charge_succeeded", "Charge succeeded"),
                    ("refund_reserved", "Refund reserved"),
                    ("refund_succeeded", "Refund succeeded"),
                    ("refund_released", "Refund released"),
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="refund",
            name="reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("duplicate", "Duplicate"),
                    ("fraudulent", "Fraudulent"),
                    ("requested_by_customer", "Requested by customer"),
                ],
                max_length=32,
            ),
        ),
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
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="refund",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("unknown", "Unknown"),
                    ("awaiting_approval", "Awaiting approval"),
                    ("canceled", "Canceled"),
                ],
                default="pending",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("delivered", "Delivered"),
                    ("failed", "Failed (gave up)"),
                    ("canceled", "Canceled"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="StaffPreference",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "time_zone",
                    models.CharField(
                        blank=True, help_text="An IANA name such as Europe/Paris.", max_length=64
                    ),
                ),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="staff_preference",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
    ]
