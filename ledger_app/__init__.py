"""The refund back office's one Django app: a room per domain, the shared modules they
use, and the interfaces (admin, API, commands) that call them."""
