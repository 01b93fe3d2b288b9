"""Every /v1/ endpoint, found from the URL configuration, and one request to it: for the
access tests."""

from __future__ import annotations

from urllib.parse import urlencode

from django.test import Client
from django.urls import URLResolver, get_resolver

FORM = "application/x-www-form-urlencoded"


DOCUMENTATION = {"openapi", "api-docs"}  # the published schema: no ledger data in it


def walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def api_endpoints() -> list[tuple[str, list[str]]]:
    """(path template, methods) of every named /v1/ endpoint."""
    endpoints = []
    for route, pattern in walk(get_resolver().url_patterns):
        if not route.startswith("v1/") or not pattern.name or pattern.name in DOCUMENTATION:
            continue
        view = pattern.callback.view_class
        methods = [m for m in ("get", "post", "delete") if hasattr(view, m)]
        endpoints.append(("/" + route, methods))
    return endpoints


def send(client: Client, method: str, path: str, **headers):
    body = urlencode({"amount": "100", "currency": "usd"})
    if method == "post":
        return client.post(path, body, content_type=FORM, **headers)
    return getattr(client, method)(path, **headers)
