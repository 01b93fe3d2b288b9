"""Django admin: where support staff look things up and issue refunds.

Every refund made here goes through ledger_app.refunds.services.create_refund.
"""

from ledger_app.admin import (  # noqa: F401 - registers the admins
    approvals,
    attention,
    balance_transactions,
    books,
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

__all__ = ["ReadOnlyAdmin"]

# admin.site is a BackOfficeAdminSite (backoffice/admin_site.py: its titles, the staff
# member it admits named in the log lines, and every admin registered with the lookup
# guard, lookups.py, so it answers only the lookups its filters use and never reads a
# secret; `manage.py check` says when one does not).
