"""The REST API in Stripe's wire format: authentication, parameters, versions and one
module of views per resource."""
