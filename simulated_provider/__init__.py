"""A stand-in payment provider for the demo and the tests: its own books, and the
webhooks it sends as Stripe does. It imports nothing from the back office."""
