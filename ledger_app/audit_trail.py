"""The audit trail outlives people: a user who issued refunds or has admin history cannot
be deleted (deactivate them instead), from the admin, a shell or a queryset alike."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.admin.models import LogEntry
from django.db.models import Count, ProtectedError

from ledger_app.refunds.models import Refund

HOW_TO_LEAVE = "deactivate them instead (is_active=False)"


@dataclass(frozen=True)
class AuditRows:
    """How many audit rows name one user."""

    refunds_issued: int = 0
    admin_history: int = 0

    def __bool__(self) -> bool:
        return bool(self.refunds_issued or self.admin_history)

    def describe(self) -> str:
        """'issued 3 refunds and has 12 admin history entries'"""
        parts = []
        if self.refunds_issued:
            parts.append(f"issued {_plural(self.refunds_issued, 'refund')}")
        if self.admin_history:
            parts.append(f"has {_plural(self.admin_history, 'admin history entry')}")
        return " and ".join(parts)


def _plural(count: int, noun: str) -> str:
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"


def audit_rows_of(user_ids: Iterable[object]) -> dict[object, AuditRows]:
    """The users among `user_ids` that audit rows name, with their counts (two queries).

    Audit rows: refunds they issued (Refund.created_by, PROTECT) and the admin's own
    history of what they did (LogEntry.user, which Django declares CASCADE)."""
    ids = list(user_ids)
    if not ids:
        return {}
    refunds = dict(
        Refund.objects.filter(created_by__in=ids)
        .order_by()
        .values_list("created_by")
        .annotate(n=Count("pk"))
    )
    history = dict(
        LogEntry.objects.filter(user__in=ids).order_by().values_list("user").annotate(n=Count("pk"))
    )
    return {
        pk: AuditRows(refunds_issued=refunds.get(pk, 0), admin_history=history.get(pk, 0))
        for pk in ids
        if pk in refunds or pk in history
    }


def refuse_to_delete_audited_user(sender, instance, **kwargs) -> None:
    """pre_delete for the user model. Django's collector sends pre_delete for every
    instance before it deletes anything (cascaded LogEntry rows included) and inside the
    delete's transaction, so raising here keeps the user and all their rows."""
    rows = audit_rows_of([instance.pk]).get(instance.pk)
    if rows:
        raise ProtectedError(
            f"User {instance.get_username()!r} {rows.describe()}; {HOW_TO_LEAVE}.",
            # a sample of the rows, for whoever catches this; the message has the counts
            {
                *Refund.objects.filter(created_by=instance.pk).order_by("-created_at")[:10],
                *LogEntry.objects.filter(user=instance.pk).order_by("-action_time")[:10],
            },
        )
