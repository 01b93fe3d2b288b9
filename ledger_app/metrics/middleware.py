"""Request metrics: django-prometheus's, plus the API's responses by status."""

from __future__ import annotations

from django_prometheus.middleware import PrometheusAfterMiddleware

from ledger_app import metrics


class RequestMetricsMiddleware(PrometheusAfterMiddleware):
    """django-prometheus's responses by status, view and method, and latency by view.

    First in MIDDLEWARE (django-prometheus's own "After" middleware, placed outermost on
    purpose): it then counts the response the client got, including those a middleware
    made (a CSRF refusal, a lockout, a 500 page), and its latency includes the middleware.
    django-prometheus's "Before" middleware would only add request totals seen before
    any middleware runs, which this one's counts already give.
    """

    def process_response(self, request, response):
        response = super().process_response(request, response)
        if request.path_info == "/v1" or request.path_info.startswith("/v1/"):
            metrics.count_api_response(response.status_code, self._get_view_name(request))
        return response
