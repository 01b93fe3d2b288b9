"""Stripe API versions: keys and webhook endpoints that existed before keep the shapes
they had (the oldest version, whose charges embed their refunds); new ones default to the
newest."""

from django.db import migrations, models

LEGACY = "2020-08-27"  # api_versions.LEGACY when this was written
LATEST = "2026-10-28.endive"  # api_versions.LATEST when this was written


def field(default: str, help_text: str) -> models.CharField:
    return models.CharField(default=default, help_text=help_text, max_length=32)


KEY_HELP = "The Stripe API version its requests get without a Stripe-Version header."
ENDPOINT_HELP = "The Stripe API version its events are rendered in."


class Migration(migrations.Migration):
    dependencies = [
        ("ledger_app", "0022_payment_intents"),
    ]

    operations = [
        # Existing rows get LEGACY; rows made from now on get LATEST.
        migrations.AddField("apikey", "api_version", field(LEGACY, KEY_HELP)),
        migrations.AlterField("apikey", "api_version", field(LATEST, KEY_HELP)),
        migrations.AddField("webhookendpoint", "api_version", field(LEGACY, ENDPOINT_HELP)),
        migrations.AlterField("webhookendpoint", "api_version", field(LATEST, ENDPOINT_HELP)),
    ]
