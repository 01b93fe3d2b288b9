"""Access: API keys, staff preferences, the second factor."""
