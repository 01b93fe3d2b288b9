"""Django admin: where support staff look things up and issue refunds.

Every refund made here goes through ledger_app.services.refunds.create_refund.
"""

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
