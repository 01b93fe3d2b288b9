"""Charges: the charges refunds are made against, created through the API or imported."""
