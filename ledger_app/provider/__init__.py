"""The provider: the gateway port and its adapters, dispatch of refunds and charges to
it, reconciliation, and the webhooks it sends us."""
