"""Refunds: the one service that writes them, its checks, and bulk refunds."""
