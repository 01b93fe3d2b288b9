"""Disputes of charges, as the provider tells of them: their money in the ledger, their
news to our webhook endpoints."""
