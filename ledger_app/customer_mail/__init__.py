"""Customer mails: what a customer is told of their refund, written with the change it tells
of and sent once (docs/customer-mails.md)."""
