"""The books closed against the provider: its balance transactions and payouts, mirrored,
matched to the ledger day by day (docs/operating/books.md)."""
