"""The ledger: append-only entries, and the check that the books agree with them."""
