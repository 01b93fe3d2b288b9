"""Rendering: objects as Stripe's wire format shows them, for the API and for the
events the services record."""
