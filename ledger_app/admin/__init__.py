"""Django admin: where support staff look things up and issue refunds.

Every refund made here goes through ledger_app.services.refunds.create_refund.
"""

from django.contrib import admin

from ledger_app.admin import (  # noqa: F401 - registers the admins
    approvals,
    charges,
    refunds,
    sign_in,
    users,
    webhooks,
)
from ledger_app.admin.base import ReadOnlyAdmin

__all__ = ["ReadOnlyAdmin"]

# What every admin page calls itself: the header, the browser tab ("Log in | Refund back
# office") and the home page's heading.
admin.site.site_header = "Refund back office"
admin.site.site_title = "Refund back office"
admin.site.index_title = "Home"
