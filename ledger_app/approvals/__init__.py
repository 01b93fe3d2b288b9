"""Limits and approvals: who may refund how much alone, and the four-eyes decision on
what is over a limit."""
