"""Webhook signing secrets encrypted at rest (ledger_app/encryption.py): the column becomes
text, each stored secret is encrypted in place, then the column is the encrypted field.
Backwards decrypts them again."""

from django.db import migrations, models

import ledger_app.encryption


def encrypt_secrets(apps, schema_editor):
    endpoints = apps.get_model("ledger_app", "WebhookEndpoint").objects
    for pk, secret in endpoints.values_list("pk", "secret").iterator():
        if secret:
            endpoints.filter(pk=pk).update(secret=ledger_app.encryption.encrypt(secret))


def decrypt_secrets(apps, schema_editor):
    endpoints = apps.get_model("ledger_app", "WebhookEndpoint").objects
    for pk, token in endpoints.values_list("pk", "secret").iterator():
        if token:
            endpoints.filter(pk=pk).update(secret=ledger_app.encryption.decrypt(token))


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0019_rate_counters")]

    operations = [
        # Plain text while the rows are rewritten: a token is longer than 100 characters.
        migrations.AlterField(
            model_name="webhookendpoint",
            name="secret",
            field=models.TextField(editable=False),
        ),
        migrations.RunPython(encrypt_secrets, decrypt_secrets, elidable=False),
        migrations.AlterField(
            model_name="webhookendpoint",
            name="secret",
            field=ledger_app.encryption.EncryptedSecretField(editable=False),
        ),
    ]
