"""Request metrics: django-prometheus's, plus the API's responses by status, every label
from a closed set so that no request can add a series."""

from __future__ import annotations

import logging

from django.conf import settings
from django.urls import Resolver404, resolve
from django_prometheus.middleware import PrometheusAfterMiddleware

from ledger_app import metrics

log = logging.getLogger("ledger_app.metrics")

# RFC 9110's methods and PATCH: anything else a client sends is counted as OTHER. Each
# made-up method would otherwise be a new series of every metric labelled by method.
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
OTHER = "other"
# The view of a path that no route matches (a 404, or a refusal before the URL was read).
UNMATCHED = "unmatched"

_warned_open = False


def method_label(method: str | None) -> str:
    return method if method in METHODS else OTHER


def status_label(status: object) -> str:
    """HTTP's status codes as they are; anything outside 100-599 as OTHER."""
    return str(status) if isinstance(status, int) and 100 <= status <= 599 else OTHER


def view_label(request) -> str:
    """The URL name (or the view's dotted path) of the route the path matched, as the
    URL conf declares it: a finite set. A path that matches none is UNMATCHED, never the
    path itself. A request refused by a middleware before the URL was resolved (a lockout,
    the admin's write gate) is resolved here, so it counts under its route too."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        try:
            match = resolve(request.path_info, getattr(request, "urlconf", None))
        except Resolver404:
            return UNMATCHED
        except Exception:  # a path the resolver chokes on is just unmatched
            return UNMATCHED
    return match.view_name or UNMATCHED


# Labels django-prometheus takes from the request or the response, and how each is closed.
# The others (transport, templatename, charset, type) come from the code, not the client.
_CLOSED = {
    "method": lambda value, request: method_label(value),
    "status": lambda value, request: status_label(int(value) if value.isdigit() else value),
    "view": lambda value, request: view_label(request),
}


def warn_if_open() -> None:
    """Production without METRICS_TOKEN: say once per process, at start, that /metrics
    answers anyone (check --deploy says it too: ledger_app.W250)."""
    global _warned_open
    if _warned_open or settings.DEBUG or settings.METRICS_TOKEN:
        return
    _warned_open = True
    log.warning(
        "METRICS_TOKEN is not set: GET /metrics answers anyone who can reach this server; "
        "set it and give the scraper the token (docs/operating/metrics.md)"
    )


class RequestMetricsMiddleware(PrometheusAfterMiddleware):
    """django-prometheus's responses by status, view and method, and latency by view.

    First in MIDDLEWARE (django-prometheus's own "After" middleware, placed outermost on
    purpose): it then counts the response the client got, including those a middleware
    made (a CSRF refusal, a lockout, a 500 page), and its latency includes the middleware.
    django-prometheus's "Before" middleware would only add request totals seen before
    any middleware runs, which this one's counts already give.

    Every label passes through `label_metric`, where the method, the status and the view
    are closed: django-prometheus itself labels its latency histogram with the raw
    request.method, so each made-up method was a new series.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        warn_if_open()

    def _method(self, request):
        return method_label(request.method)

    def _get_view_name(self, request):
        return view_label(request)

    def label_metric(self, metric, request, response=None, **labels):
        for name, close in _CLOSED.items():
            if name in labels:
                labels[name] = close(str(labels[name]), request)
        return super().label_metric(metric, request, response, **labels)

    def process_response(self, request, response):
        response = super().process_response(request, response)
        if request.path_info == "/v1" or request.path_info.startswith("/v1/"):
            metrics.count_api_response(
                status_label(response.status_code), self._get_view_name(request)
            )
        return response
