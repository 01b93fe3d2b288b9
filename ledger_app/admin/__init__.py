"""Django admin: where support staff look things up and issue refunds.

Every refund made here goes through ledger_app.refunds.services.create_refund.
"""

from django.contrib import admin

from ledger_app.admin import (  # noqa: F401 - registers the admins
    approvals,
    attention,
    charges,
    keys,
    ledger_entries,
    refunds,
    sign_in,
    simulated_provider,
    users,
    webhooks,
)
from ledger_app.admin.base import ReadOnlyAdmin
from ledger_app.admin.lookups import guard_every_admin

__all__ = ["ReadOnlyAdmin"]

# admin.site is a BackOfficeAdminSite (backoffice/admin_site.py: its titles, and the staff
# member it admits named in the log lines).

# Every admin, ours and those Django, django-axes and django-otp registered before this
# module ran (or anyone registers after it), answers only the lookups its filters use and
# never reads a secret (lookups.py; `manage.py check` says when one does not).
guard_every_admin(admin.site)
