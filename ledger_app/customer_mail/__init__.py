"""Customer mails: what a customer is told of their refund, written with the change it tells
of and sent once (docs/customer-mails.md)."""

from ledger_app.customer_mail import checks as _checks  # noqa: F401 - registers the deploy check
