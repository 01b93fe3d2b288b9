"""On PostgreSQL, a trigger makes ledger entries append-only whatever the code does."""

from django.db import migrations

CREATE = """
CREATE FUNCTION ledger_entry_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger entries are append-only (% refused)', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER ledger_entry_append_only
    BEFORE UPDATE OR DELETE ON ledger_app_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION ledger_entry_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS ledger_entry_append_only ON ledger_app_ledgerentry;
DROP FUNCTION IF EXISTS ledger_entry_append_only();
"""


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger_app", "0001_initial")]

    operations = [migrations.RunPython(create_trigger, drop_trigger)]
