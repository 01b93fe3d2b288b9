"""GET /metrics: Prometheus's exposition of this process's (or, in multiprocess mode, every
gunicorn worker's) counters, plus the database figures read once per scrape."""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from ledger_app.metrics.database import DatabaseCollector
from ledger_app.metrics.readiness import ReadinessCollector

DATABASE = DatabaseCollector()
READINESS = ReadinessCollector()


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Open when METRICS_TOKEN is empty (a scraper on a private network); otherwise only
    for `Authorization: Bearer <METRICS_TOKEN>`."""
    if not authorized(request.headers.get("Authorization", ""), settings.METRICS_TOKEN):
        response = HttpResponse("Unauthorized.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(scrape_registry()), content_type=content_type)


def authorized(header: str, token: str) -> bool:
    if not token:
        return True
    scheme, _, given = header.partition(" ")
    # Bytes, not str: compare_digest refuses non-ASCII str (a 500), and any header a client
    # sends must be a plain 401. surrogatepass: no str can fail to encode.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


def scrape_registry() -> CollectorRegistry:
    """What one scrape reports. With PROMETHEUS_MULTIPROC_DIR, the sum of every process's
    files there (this process's own registry would report only its share); without, this
    process's registry (with its process and GC collectors). Either way the database
    figures once, and this process's readiness, from this process alone."""
    multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = CollectorRegistry()
    if multiprocess_dir:
        MultiProcessCollector(registry, path=multiprocess_dir)
    else:
        registry.register(REGISTRY)
    registry.register(DATABASE)
    registry.register(READINESS)
    return registry
