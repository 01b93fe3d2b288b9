"""/metrics cannot be blown up from outside (issue 44, finding 3): every label a request
decides (method, path, status) comes from a closed set, so thousands of made-up requests
add no series; and production says so loudly when /metrics is open to anyone."""

from __future__ import annotations

import random
import string
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledger_app.metrics.middleware import METHODS, OTHER, UNMATCHED
from tests.processes import GunicornServer

pytestmark = pytest.mark.django_db

# Path shapes: nothing matched at all, under the API, under the admin, and a real route
# with a made-up id in it (its route name is its label, never the path).
SHAPES = ("/{}", "/v1/{}", "/v1/charges/{}", "/admin/{}/", "/webhooks/{}")


def every_series(client) -> set[tuple]:
    """Each series of one scrape: (sample name, sorted labels)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def made_up(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(string.ascii_lowercase + string.digits, k=length))


def made_up_method(rng: random.Random) -> str:
    return "X" + "".join(rng.choices(string.ascii_uppercase, k=rng.randint(3, 12)))


def send(client, method: str, path: str) -> None:
    client.generic(method, path)


class TestLabelsAreAClosedSet:
    def test_thousands_of_made_up_methods_and_paths_add_no_series(self, client, settings):
        settings.METRICS_TOKEN = ""
        rng = random.Random(44)
        # Every shape with every known method and one made-up method: the closed set's
        # series now exist, whatever this process served before.
        for shape in SHAPES:
            for method in [*sorted(METHODS), made_up_method(rng)]:
                send(client, method, shape.format(made_up(rng, 10)))
        every_series(client)  # and a scrape's own series
        before = every_series(client)

        for _ in range(2_500):
            method = made_up_method(rng) if rng.random() < 0.8 else rng.choice(sorted(METHODS))
            send(client, method, rng.choice(SHAPES).format(made_up(rng, rng.randint(1, 40))))
        after = every_series(client)

        assert after - before == set()  # not one new series from 2,500 requests

    def test_labels_are_the_known_methods_other_and_route_names(self, client, settings):
        settings.METRICS_TOKEN = ""
        rng = random.Random(3)
        segments = [made_up(rng, 16) for _ in SHAPES]
        methods_sent = [made_up_method(rng) for _ in SHAPES]
        for shape, segment, method in zip(SHAPES, segments, methods_sent, strict=True):
            send(client, method, shape.format(segment))

        text = client.get("/metrics").content.decode()
        series = every_series(client)

        for made_up_part in [*segments, *methods_sent]:
            assert made_up_part not in text
        methods = {dict(labels)["method"] for _, labels in series if "method" in dict(labels)}
        views = {dict(labels)["view"] for _, labels in series if "view" in dict(labels)}
        statuses = {dict(labels)["status"] for _, labels in series if "status" in dict(labels)}
        assert OTHER in methods
        assert methods <= {*METHODS, OTHER}
        assert UNMATCHED in views
        assert all(s == OTHER or (s.isdigit() and 100 <= int(s) <= 599) for s in statuses)

    def test_the_latency_histogram_counts_a_made_up_method_as_other(self, client, settings):
        settings.METRICS_TOKEN = ""

        send(client, "XBLOWUP", "/v1/charges")
        series = every_series(client)

        latency = {
            dict(labels)["method"]
            for name, labels in series
            if name.startswith("django_http_requests_latency_seconds_by_view_method")
        }
        assert "XBLOWUP" not in latency
        assert OTHER in latency


class TestAnOpenMetricsPageInProduction:
    def test_check_deploy_warns_without_a_token(self, settings):
        from django.core import checks

        settings.METRICS_TOKEN = ""
        warned = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])

        assert "ledger_app.W250" in {message.id for message in warned}

    def test_check_deploy_is_silent_with_a_token(self, settings):
        from django.core import checks

        settings.METRICS_TOKEN = "t" * 8 + "0123456789abcdef0123456789"
        warned = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])

        assert "ledger_app.W250" not in {message.id for message in warned}

    @pytest.mark.django_db(transaction=True)
    @pytest.mark.parametrize("token", ["", "a-scraper-token-of-forty-characters-0123"])
    def test_the_server_warns_at_start_when_metrics_are_open(self, tmp_path, token):
        server = GunicornServer(tmp_path, workers=1, threads=2, METRICS_TOKEN=token)
        try:
            server.wait_ready()
            time.sleep(0.5)  # the log line is written as the worker loads the app
            log = server.log()
        finally:
            server.stop()

        warned = [line for line in log.splitlines() if "METRICS_TOKEN is not set" in line]
        if token:
            assert warned == []
        else:
            assert len(warned) == 1, log
            assert " WARNING " in warned[0]
