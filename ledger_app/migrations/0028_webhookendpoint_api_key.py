# Which API key made a webhook endpoint, so each key's endpoints can be counted against
# WEBHOOK_ENDPOINTS_PER_KEY (issue 44, finding 2). Endpoints made before it name none:
# they count only against WEBHOOK_ENDPOINTS_TOTAL.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger_app', '0027_refund_destination_reference'),
    ]

    operations = [
        migrations.AddField(
            model_name='webhookendpoint',
            name='api_key',
            field=models.ForeignKey(blank=True, editable=False, help_text="The API key that made it (none: the back office itself); it counts against that key's WEBHOOK_ENDPOINTS_PER_KEY.", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='webhook_endpoints', to='ledger_app.apikey'),
        ),
    ]
