# Idempotency keys belong to their owner (issue 44, finding 10): an API key owns its own,
# the back office (admin forms, commands, bulk files) one set. Existing records get the
# owner that can be known: the API key that made the refund or charge the key is bound
# to (its label, `api_key:<prefix>`, as the refund's actor or the charge's ledger entries
# name it). A charge key that cannot be traced so (a charge that was declined, is still
# pending or unknown, or was settled by the reconciler) was still made by some API key:
# POST /v1/charges is create_charge's only caller. It becomes `legacy`, which any API
# key's retry with the same key replays (services/idempotency.py find_legacy_replay), so
# a client retrying a timed-out charge after the upgrade is not charged twice. Every other
# key is the back office's, and so is any key in one of its reserved namespaces. Then the
# unique key is unique per owner.
#
# Backwards, the per-owner keys become global again, which fails (and changes nothing)
# once two owners share a key.

from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery

BACK_OFFICE = "backoffice"
LEGACY_CLIENT = "legacy"
API_KEY_LABEL = "api_key:"
# services/idempotency.py RESERVED_KEY_PREFIXES as they were when this was written.
RESERVED_PREFIXES = ("admin:", "admin-bulk:", "bulk:", "demo:")


def backfill_owners(apps, schema_editor):
    Record = apps.get_model("ledger_app", "IdempotencyRecord")
    Refund = apps.get_model("ledger_app", "Refund")
    LedgerEntry = apps.get_model("ledger_app", "LedgerEntry")
    reserved = Q()
    for prefix in RESERVED_PREFIXES:
        reserved |= Q(key__istartswith=prefix)
    clients = Record.objects.exclude(reserved)
    clients.filter(refund__actor__startswith=API_KEY_LABEL).update(
        owner=Subquery(Refund.objects.filter(pk=OuterRef("refund_id")).values("actor")[:1])
    )
    captured_by_key = LedgerEntry.objects.filter(
        kind="charge_succeeded", actor__startswith=API_KEY_LABEL
    )
    clients.filter(charge_id__in=captured_by_key.values("charge_id")).update(
        owner=Subquery(
            captured_by_key.filter(charge_id=OuterRef("charge_id"))
            .order_by("pk")
            .values("actor")[:1]
        )
    )
    clients.filter(charge__isnull=False, owner=BACK_OFFICE).update(owner=LEGACY_CLIENT)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger_app", "0028_webhookendpoint_api_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencyrecord",
            name="owner",
            field=models.CharField(
                default=BACK_OFFICE,
                help_text="Whose key it is: api_key:<prefix> for an API client, backoffice "
                "for the back office's own (admin forms, commands), legacy for a charge key "
                "some API key made before keys had owners.",
                max_length=64,
            ),
        ),
        migrations.RunPython(backfill_owners, migrations.RunPython.noop, elidable=False),
        migrations.RemoveConstraint(
            model_name="idempotencyrecord",
            name="idempotency_key_unique",
        ),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.UniqueConstraint(
                fields=("owner", "key"), name="idempotency_owner_key_unique"
            ),
        ),
    ]
