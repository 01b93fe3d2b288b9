"""What the data migrations wrote, written again after every flush.

A transactional test (transaction=True, live_server) ends with a flush that empties every
table. Django's post_migrate handlers then make the permissions and content types again,
but nothing makes the groups the data migrations made ("Support agents", "Support leads"
and their permissions). In a new test database the tests that need them run before the
first flush (pytest-django runs transactional tests last), but a database kept with
`--reuse-db` was flushed by the run before.

So at the start of a run (migrate sends post_migrate too, with nothing left to apply) this
runs the migrations' own functions again, against the models as migrated, and notes what
they made; after every flush it writes that again in a few statements (the functions
themselves take a quarter of a second, and there are hundreds of flushes in a run).
"""

from __future__ import annotations

from importlib import import_module

from django.apps import apps as installed
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.models.signals import post_migrate

# (migration, its function that writes rows), in the order the migrations run. A new data
# migration whose rows a test needs is added here.
WRITES = [
    ("0006_support_agents_group", "create_group"),
    ("0010_support_agents_see_webhooks", "grant"),
    ("0015_support_leads_group", "create_group"),
    ("0016_csv_export_permissions", "grant"),
    ("0033_books_for_support_staff", "grant"),
]
# Each group the functions made: its permissions as (app label, codename).
_made: dict[str, list[tuple[str, str]]] = {}


def _migrations():
    return [(import_module(f"ledger_app.migrations.{m}"), f) for m, f in WRITES]


def _run_the_migrations(using: str) -> None:
    """The functions themselves, with the models as the last migration leaves them."""
    migrated = MigrationLoader(connections[using], ignore_no_migrations=True).project_state()
    for module, function in _migrations():
        getattr(module, function)(migrated.apps, None)
    names: set[str] = set()
    for module, _ in _migrations():  # each names its group (GROUP) or groups (GROUPS)
        names.update(getattr(module, "GROUPS", []), [getattr(module, "GROUP", "")])
    names.discard("")
    group_model = installed.get_model("auth", "Group")
    for group in group_model.objects.using(using).filter(name__in=names):
        permissions = group.permissions.values_list("content_type__app_label", "codename")
        _made[group.name] = sorted(permissions)


def _write_again(using: str) -> None:
    group_model = installed.get_model("auth", "Group")
    permission_model = installed.get_model("auth", "Permission")
    groups = group_model.objects.using(using)
    if groups.filter(name__in=_made).exists():
        return  # not emptied since
    ids = {
        (app_label, codename): pk
        for app_label, codename, pk in permission_model.objects.using(using).values_list(
            "content_type__app_label", "codename", "pk"
        )
    }
    through = group_model.permissions.through
    rows = []
    for name, permissions in _made.items():
        group = groups.create(name=name)
        rows += [through(group=group, permission_id=ids[key]) for key in permissions]
    through.objects.using(using).bulk_create(rows)


def write_again(sender, using=DEFAULT_DB_ALIAS, **kwargs) -> None:
    """A post_migrate receiver: after migrate or a flush, once the last app's permissions
    are made (post_migrate is sent app by app), on the database the migrations write to."""
    last = [a for a in installed.get_app_configs() if a.models_module is not None][-1]
    if sender is not last or using != DEFAULT_DB_ALIAS:
        return
    if _made:
        _write_again(using)
    else:
        _run_the_migrations(using)


def install() -> None:
    post_migrate.connect(write_again, dispatch_uid="tests.migration_data")
