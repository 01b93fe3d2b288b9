"""Idempotency: keys that make a retry replay what the first request made."""
