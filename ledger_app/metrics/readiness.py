"""What GET /readyz would answer, as gauges read at each scrape: Prometheus cannot probe
/readyz itself (that takes a blackbox exporter), but it scrapes /metrics from every web
process, so each reports its own readiness there (docs/operating/metrics.md)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from serving import health


class ReadinessCollector(Collector):
    """The readiness probe's own checks (serving.health.readiness_checks), run once per
    scrape in the process that answers it. Added to each scrape's registry, like the
    database figures: never counted into PROMETHEUS_MULTIPROC_DIR's files."""

    def collect(self) -> Iterator[Metric]:
        checks = health.readiness_checks()
        yield GaugeMetricFamily(
            "ledger_ready",
            "1 when GET /readyz would answer 200 (the database answers and every migration "
            "is applied), 0 when it would answer 503.",
            value=1 if health.is_ready(checks) else 0,
        )
        by_check = GaugeMetricFamily(
            "ledger_readiness_check",
            "Each readiness check: 1 ok, 0 failed or not checked (GET /readyz says why).",
            labels=["check"],
        )
        for name, outcome in checks.items():
            by_check.add_metric([name], 1 if outcome == health.OK else 0)
        yield by_check
