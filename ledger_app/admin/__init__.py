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
    users,
    webhooks,
)
from ledger_app.admin.base import ReadOnlyAdmin
from ledger_app.admin.lookups import guard_every_admin
from serving.logs import bind

__all__ = ["ReadOnlyAdmin"]

# What every admin page calls itself: the header, the browser tab ("Log in | Refund back
# office") and the home page's heading.
admin.site.site_header = "Refund back office"
admin.site.site_title = "Refund back office"
admin.site.index_title = "Home"


def _has_permission(request, _admits=admin.site.has_permission) -> bool:
    """The check every admin page passes (AdminSite.admin_view): once it admits a staff
    member, the rest of the request's log lines name them."""
    admitted = _admits(request)
    if admitted:
        bind(staff_user=request.user.get_username())
    return admitted


admin.site.has_permission = _has_permission  # type: ignore[method-assign]


# Every admin, ours and those Django, django-axes and django-otp registered before this
# module ran (or anyone registers after it), answers only the lookups its filters use and
# never reads a secret (lookups.py; `manage.py check` says when one does not).
guard_every_admin(admin.site)
