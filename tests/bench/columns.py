"""The benchmark's raw-SQL INSERTs, with their column lists taken from the models, so a
migration that adds a column cannot break them (a NOT NULL column the SQL left out did,
once: issue 17's `decided_by`).

A loader names the columns it gives a value (an SQL expression); every other column gets
the model's default, written as SQL: `now()` for a creation or change time, the literal
of a constant default, NULL where the column allows it. A column with a database default
(`db_default`) is left to the database. A NOT NULL column with no default at all stops the
bench at once, naming it: the loader must say what it holds. So does a column the
loader names that the model does not have.

The parent process of the bench never imports Django (its worker processes each set up
their own, against their own database), so the columns are read once by a child process
(`python tests/bench/columns.py` prints them as JSON) and handed down to the others.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLES = (
    "ledger_app.Charge",
    "ledger_app.Refund",
    "ledger_app.LedgerEntry",
    "ledger_app.IdempotencyRecord",
    "ledger_app.Event",
    "ledger_app.WebhookDelivery",
    "ledger_app.ProviderEvent",
)
NO_DEFAULT = None  # in the JSON: the loader must give this column


def _default_sql(field) -> str | None:
    """The SQL for a column the loader leaves out (None: it has no default)."""
    from django.db import models
    from django.utils import timezone

    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return "now()"
    if field.has_default():
        if field.default is timezone.now:
            return "now()"
        value = field.get_default()
        if isinstance(field, models.JSONField):
            return _quoted(json.dumps(value)) + "::jsonb"
        return _literal(field, value)
    if field.null:
        return "NULL"
    if field.empty_strings_allowed and field.get_default() == "":
        return "''"  # Django saves a text field left unset as ""
    return NO_DEFAULT


def _literal(field, value: object) -> str:
    """A field's plain default as an SQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _quoted(value)
    raise TypeError(f"{field.model.__name__}.{field.name}: a default of {value!r}")


def _quoted(text: str) -> str:
    # Loaders run with psycopg parameters, so a literal % is written %%.
    return "'" + text.replace("'", "''").replace("%", "%%") + "'"


def model_columns() -> dict[str, dict]:
    """Inside Django: each table's columns, in the model's order, with the SQL of their
    default ({"table": ..., "columns": [[column, default or None], ...]})."""
    from django.apps import apps
    from django.db.models import NOT_PROVIDED, AutoField, BigAutoField

    found = {}
    for label in TABLES:
        model = apps.get_model(label)
        columns = []
        for field in model._meta.concrete_fields:
            if isinstance(field, AutoField | BigAutoField):
                continue  # the sequence numbers it
            if field.db_default is not NOT_PROVIDED:
                columns.append([field.column, "DEFAULT"])
                continue
            columns.append([field.column, _default_sql(field)])
        found[label] = {"table": model._meta.db_table, "columns": columns}
    return found


# Where the parent leaves what it read for the processes it starts (they inherit its
# environment), so each of them does not start a Django of its own to read it again.
INHERITED = "BENCH_MODEL_COLUMNS"


@functools.cache
def _columns() -> dict[str, dict]:
    if inherited := os.environ.get(INHERITED):
        return json.loads(inherited)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "backoffice.settings",
        "DJANGO_DEBUG": "true",  # only the models are read: no secret key needed
        "DJANGO_DOTENV": "false",
    }
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"reading the models' columns failed:\n{done.stderr}")
    os.environ[INHERITED] = done.stdout
    return json.loads(done.stdout)


def names(label: str) -> list[str]:
    """Every column of the table, in the model's order."""
    return [column for column, _default in _columns()[label]["columns"]]


def insert(label: str, given: dict[str, str], rest: str, *, composed: bool = False) -> str:
    """`INSERT INTO <table> (<every column>) SELECT <given or default, per column> <rest>`:
    `rest` is the FROM clause (and the rest of the SELECT) the expressions read.
    `composed`: the statement goes through psycopg's sql.SQL(...).format() and runs with no
    parameters, so the defaults' braces are doubled and their % left single."""
    spec = _columns()[label]
    given = dict(given)
    names, values = [], []
    for column, default in spec["columns"]:
        if column in given:
            value = given.pop(column)
        elif default == "DEFAULT":
            continue
        elif default is NO_DEFAULT:
            raise ValueError(f"{label}.{column} has no default: the bench must give it a value")
        else:
            value = default
            if composed:
                value = value.replace("%%", "%").replace("{", "{{").replace("}", "}}")
        names.append(column)
        values.append(value)
    if given:
        raise ValueError(f"{label} has no column {', '.join(sorted(given))}")
    return f"INSERT INTO {spec['table']} ({', '.join(names)})\nSELECT {', '.join(values)}\n{rest}"


def charge_succeeded_entries(*, composed: bool = False) -> str:
    """One `charge_succeeded` ledger entry per charge already in the table (the year's load
    and the restore drill both start the ledger this way)."""
    return insert(
        "ledger_app.LedgerEntry",
        {
            "charge_id": "id",
            "kind": "'charge_succeeded'",
            "amount": "amount",
            "refunded_delta": "0",
            "currency": "currency",
            "actor": "'bench'",
            "created_at": "created_at",
        },
        "FROM ledger_app_charge",
        composed=composed,
    )


def insert_values(label: str, given: dict[str, str], suffix: str = "") -> str:
    """The same for one row: `INSERT ... VALUES (...)` (then `suffix`, say RETURNING)."""
    statement = insert(label, given, "")
    head, select = statement.split("\nSELECT ", 1)
    return f"{head}\nVALUES ({select.strip()}) {suffix}".rstrip()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    print(json.dumps(model_columns()))
