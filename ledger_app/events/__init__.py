"""Events and webhooks: what changed, recorded as Stripe's events, and its delivery to
clients' endpoints through the one way out (egress)."""
