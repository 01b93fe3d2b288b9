"""Changes to who may move money (limits, groups, people's permissions), written to the admin
log with before and after, and logged at WARNING naming who made them."""

from __future__ import annotations

import json
import logging

from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.db import models

from ledger_app.mixin_bases import ModelAdminMixin

log = logging.getLogger("ledger_app.admin.access")


def shown(value) -> str:
    """A value as the log tells it: permissions by their app_label.codename, sets sorted."""
    if value is None:
        return "none"
    if isinstance(value, Permission):
        return f"{value.content_type.app_label}.{value.codename}"
    if isinstance(value, list | tuple | set):
        return "[" + ", ".join(sorted(shown(v) for v in value)) + "]"
    return str(value)


class AccessChangeLog(ModelAdminMixin):
    """A ModelAdmin mixin: the fields in `audited_fields`, before and after every add, change
    and delete made in the admin, in the LogEntry's message and a WARNING line. Only fields
    named there are recorded, so a password or a key's hash never is."""

    audited_fields: tuple[str, ...] = ()

    def audited_value(self, obj, name: str) -> str:
        field = obj._meta.get_field(name)
        if field.many_to_many:
            related = getattr(obj, name).all()
            if field.related_model is Permission:
                related = related.select_related("content_type")
            return shown(list(related))
        return shown(getattr(obj, name))

    def access_of(self, obj) -> dict[str, str]:
        return {name: self.audited_value(obj, name) for name in self.audited_fields}

    def label(self, name: str) -> str:
        return str(self.model._meta.get_field(name).verbose_name)

    def save_model(self, request, obj, form, change):
        # Before the row (and, in save_related, its many-to-many) is written: as stored.
        stored = self.model._default_manager.filter(pk=obj.pk).first() if change else None
        form.access_before = self.access_of(stored) if stored is not None else {}
        super().save_model(request, obj, form, change)

    def construct_change_message(self, request, form, formsets, add=False):
        message = super().construct_change_message(request, form, formsets, add)
        before = getattr(form, "access_before", None)
        if before is None:  # not a form this admin saved (e.g. the password change form)
            return message
        obj = self.model._default_manager.get(pk=form.instance.pk)
        after = self.access_of(obj)
        if add:
            words = "Added with " + "; ".join(f"{self.label(n)} {v}" for n, v in after.items())
        else:
            changed = [n for n in self.audited_fields if before.get(n) != after[n]]
            if not changed:
                return message
            words = "Before → after: " + "; ".join(
                f"{self.label(n)} {before.get(n)} → {after[n]}" for n in changed
            )
        record_access_change(request, "added" if add else "changed", obj, words)
        default = LogEntry(change_message=json.dumps(message)).get_change_message()
        return f"{default} {words}." if not add else f"{words}."

    def log_deletions(self, request, queryset):
        """Each deleted object's entry says what it was (Django's says nothing)."""
        entries = []
        for obj in queryset:
            words = "Deleted. Before: " + "; ".join(
                f"{self.label(n)} {v}" for n, v in self.access_of(obj).items()
            )
            record_access_change(request, "deleted", obj, words)
            entries.append(
                LogEntry.objects.log_actions(
                    user_id=request.user.pk,
                    queryset=[obj],
                    action_flag=DELETION,
                    change_message=f"{words}.",
                    single_object=True,
                )
            )
        return entries


def record_access_change(request, verb: str, obj: models.Model, words: str) -> None:
    log.warning(
        "access %s by %s: %s %r. %s",
        verb,
        request.user.get_username(),
        obj._meta.verbose_name,
        str(obj),
        words,
    )
