"""The widest text real data can put in each admin list: free text at (or near) its
field's limit, with tokens that cannot wrap (conftest.py's widest_rows fixture)."""

from __future__ import annotations

# Free text at (or near) its field's limit, with tokens that cannot wrap: what a list must
# truncate rather than be widened by.
LONG_CUSTOMER = "acme-procurement-emea-accounts-payable-" + "0123456789abcdef" * 13  # 247
LONG_DESCRIPTION = (
    "Annual enterprise licence renewal for 250 seats including premium support, "
    "onboarding workshops and the data-residency add-on, invoice "
    "https://billing.example.com/invoices/2025/INV-000000000000000000000000000000000123 "
) * 4
LONG_DETAIL = (
    "card_declined: The card issuer declined the refund because the original card account "
    "was closed; the customer must be refunded by bank transfer (issuer reference "
    "ISS-00000000000000000000000000000000000000000000000000)."
)
LONG_USERNAME = "firstname.middlename.lastname.support-team-emea@" + "x" * 100  # 150
LONG_KEY = "checkout-service:order-" + "7" * 232  # 255, an idempotency key at its limit
LONG_URL = "https://hooks.example-merchant-platform.com/webhooks/refunds/" + "a1b2c3d4" * 30
