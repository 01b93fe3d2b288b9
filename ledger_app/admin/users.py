"""Django's user and group admins, except that people on the audit trail are deactivated,
not deleted, and that changes to who may do what are logged with before and after.

A user who issued refunds or has admin history cannot be deleted, from the user's delete
page or the "Delete selected users" action: Django's own confirmation lists what protects
them and the page says to deactivate them instead (templates/admin/auth/user/). Users with
no audit rows are deleted as before. A user's status, groups and permissions, and a group's
permissions, are written to the admin log before and after every change (change_log.py);
everything else is Django's UserAdmin and GroupAdmin.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ledger_app.admin.base import clipped
from ledger_app.admin.change_log import AccessChangeLog
from ledger_app.admin.filters import IssuedByFilter
from ledger_app.audit_trail import AuditRows, audit_rows_of

User = get_user_model()

ACTIVE_HELP_TEXT = (
    "Untick this to make someone leave: they can no longer sign in, and the refunds and "
    "admin history they left keep naming them. Users who issued refunds or have admin "
    "history cannot be deleted."
)


class AuditedUserAdmin(AccessChangeLog, auth_admin.UserAdmin):
    list_display = ["username_display", "email_display", "name", "is_staff", "is_active"]
    audited_fields = ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")

    class Media:
        css = {"all": ["ledger_app/admin.css"]}  # the list fits its window, as every list

    @admin.display(description="Username", ordering="username")
    def username_display(self, user) -> str:
        return clipped(user.get_username(), "text")

    @admin.display(description="Email address", ordering="email")
    def email_display(self, user) -> str:
        return clipped(user.email, "text")

    @admin.display(description="Name", ordering="last_name")
    def name(self, user) -> str:
        return clipped(user.get_full_name(), "text")

    def get_deleted_objects(self, objs, request):
        """Users named by audit rows are protected: Django's delete page and bulk action
        then refuse, and list each such user with what they did (a count and a link, not
        every row: someone may have thousands)."""
        audited = audit_rows_of(obj.pk for obj in objs)
        if not audited:
            return super().get_deleted_objects(objs, request)
        protected = [self.audit_line(obj, audited[obj.pk]) for obj in objs if obj.pk in audited]
        return [], {}, set(), protected

    def audit_line(self, user, rows: AuditRows) -> str:
        change_url = reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[quote(user.pk)],
        )
        line = format_html('User <a href="{}">{}</a> {}', change_url, user, rows.describe())
        if rows.refunds_issued:
            refunds_url = reverse(f"{self.admin_site.name}:ledger_app_refund_changelist")
            query = urlencode({IssuedByFilter.parameter_name: user.pk})
            line = format_html('{} (<a href="{}?{}">their refunds</a>)', line, refunds_url, query)
        return line

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "is_active" and formfield is not None:
            formfield.help_text = ACTIVE_HELP_TEXT
        return formfield


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, AuditedUserAdmin)


class AuditedGroupAdmin(AccessChangeLog, auth_admin.GroupAdmin):
    audited_fields = ("name", "permissions")


if admin.site.is_registered(Group):
    admin.site.unregister(Group)
admin.site.register(Group, AuditedGroupAdmin)
