"""The optional read replica (DATABASE_REPLICA_URL): which database a read that may be a
moment behind goes to, and what happens when the replica does not answer.

Only pages that show rows read it: the admin's charge and refund lists (their GET) and the
API's GETs of charges, refunds and events. Everything else (services, row locks, money
checks, idempotency keys, API key authentication, admin forms and actions) uses the
primary, because there is no router: a query goes to the replica only inside `stale_ok`
(or with `.using(reads())`, which has no fallback).

When a read fails on the replica, it is made again on the primary in the same request and
a warning is logged: no request fails because the replica did. When the replica itself
failed (it cannot be reached, a connection died, a query was cancelled by recovery: an
OperationalError or InterfaceError), this process also reads from the primary for
RETRY_AFTER_SECONDS before it tries the replica again, so an unreachable replica costs
one connect timeout per process every RETRY_AFTER_SECONDS, not one per request. Any other
database error (say a column a lagging replica does not have yet, mid-deploy) falls back
for that read only.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    connections,
)

from ledger_app.db import connection_lost
from ledger_app.mixin_bases import ModelAdminMixin

log = logging.getLogger("ledger_app.replica")

REPLICA = "replica"
RETRY_AFTER_SECONDS = 30.0

T = TypeVar("T")

_down_until = 0.0  # time.monotonic() before which reads skip the replica (this process)


def configured() -> bool:
    return REPLICA in settings.DATABASES


def reads() -> str:
    """The database alias for reads that may be a moment behind: the replica when one is
    configured and not resting after a failure, else the primary."""
    if configured() and time.monotonic() >= _down_until:
        return REPLICA
    return DEFAULT_DB_ALIAS


def stale_ok(read: Callable[[str], T], *, missing: tuple[type[Exception], ...] = ()) -> T:
    """`read(alias)` on the replica (see reads), or on the primary if the replica fails.

    `missing`: exceptions by which `read` says an object it was asked for does not exist.
    Raised on the replica, they are checked on the primary, which may already have it (a
    refund retrieved right after it was created), so a replica behind never answers 404.
    """
    alias = reads()
    if alias == DEFAULT_DB_ALIAS:
        return read(alias)
    try:
        return read(alias)
    except missing:
        pass
    except DatabaseError as exc:
        if connection_lost(exc):
            _rest(exc)
        else:
            log.warning("a read failed on the replica, reading from the primary: %s", _says(exc))
    return read(DEFAULT_DB_ALIAS)


def _rest(exc: Exception) -> None:
    """The replica failed: drop its connection and read from the primary for a while."""
    global _down_until
    _down_until = time.monotonic() + RETRY_AFTER_SECONDS
    log.warning(
        "read replica failed, reading from the primary for %ss: %s",
        int(RETRY_AFTER_SECONDS),
        _says(exc),
    )
    with contextlib.suppress(DatabaseError):  # a dead connection may fail to close
        connections[REPLICA].close()


def _says(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class ListsFromReplica(ModelAdminMixin):
    """For a ModelAdmin: its changelist page, when only looked at (GET), reads the replica.

    Actions and list edits are POSTs to the same view: their querysets come from the
    primary, as do the change page, the history and everything else that calls
    get_queryset. `lists_from_replica = False` keeps a subclass's list on the primary.
    The page is rendered inside the read, so a replica that fails while the template
    walks the rows is read again from the primary too.
    """

    lists_from_replica = True

    def changelist_view(self, request, extra_context=None):
        if request.method != "GET" or not self.lists_from_replica:
            return super().changelist_view(request, extra_context)

        def page(alias: str):
            request.ledger_list_alias = alias
            try:
                response = super(ListsFromReplica, self).changelist_view(request, extra_context)
                if hasattr(response, "render"):
                    response.render()
                return response
            finally:
                del request.ledger_list_alias

        return stale_ok(page)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        alias = getattr(request, "ledger_list_alias", None)
        return queryset.using(alias) if alias else queryset
