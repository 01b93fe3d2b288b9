"""The provider mirror: what the payment provider tells us (its webhooks) applied to the
books: our own refunds and charges settled, charges it made arrive, refunds made at the
provider adopted into the ledger."""
