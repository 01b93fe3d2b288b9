"""A real Prometheus evaluates the shipped alerts against a real server: gunicorn as
`make run` serves it (production mode, two workers, PROMETHEUS_MULTIPROC_DIR, METRICS_TOKEN),
scraped every second through the shipped scrape configuration and its bearer token, with
alerts.yml's own expressions, their `for` and the unknown refund's hour cut to seconds.
A refund goes unknown through the API; the alert fires in Prometheus's own API;
`manage.py reconcile` settles the refund; the alert resolves. Everything on 127.0.0.1."""

from __future__ import annotations

import time

import pytest
import requests
import yaml

from ledger_app.access.api_keys import create_api_key
from ledger_app.models import Refund
from tests.factories import ChargeFactory
from tests.processes import GunicornServer, run_command
from tests.prometheus import (
    ALERTS,
    JOB,
    TOKEN_FILE,
    PrometheusServer,
    alert_rules,
    scrape_config,
    shortened_rules,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

UNKNOWN_ALERT = "RefundUnknownOverAnHour"
# An unknown refund two seconds old stands for one an hour old.
THRESHOLDS = {UNKNOWN_ALERT: ("> 3600", "> 2")}
TOKEN = "prometheus-test-metrics-token"
WAIT = 30  # seconds, for any one thing Prometheus is to see


def active(prometheus: PrometheusServer, name: str, state: str = "firing") -> list[dict]:
    return [
        alert
        for alert in prometheus.alerts()
        if alert["labels"]["alertname"] == name and alert["state"] == state
    ]


def target_up(prometheus: PrometheusServer) -> bool:
    targets = prometheus.api("targets")["activeTargets"]
    return bool(targets) and all(target["health"] == "up" for target in targets)


def rules_evaluated(prometheus: PrometheusServer) -> list[dict]:
    """Every alerting rule, once each has been evaluated without error (health "ok");
    empty until then."""
    rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
    return rules if rules and all(rule["health"] == "ok" for rule in rules) else []


def test_an_unknown_refund_fires_the_alert_and_settling_it_resolves_it(
    tmp_path, prometheus_server_binary
):
    started = time.monotonic()
    _, api_key = create_api_key(name="prometheus-test")
    charge = ChargeFactory(amount=1_000, metadata={"simulate_refund": "apply_then_timeout"})
    web = GunicornServer(
        tmp_path,
        workers=2,
        threads=4,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "multiproc"),
        METRICS_TOKEN=TOKEN,
        REFUND_DISPATCH="inline",
    )
    prometheus = None
    try:
        web.wait_ready()
        rules = shortened_rules(thresholds=THRESHOLDS)
        prometheus = PrometheusServer(
            prometheus_server_binary,
            tmp_path / "prometheus",
            config=scrape_config(target=f"127.0.0.1:{web.port}", rule_file="rules.yml", every="1s"),
            files={"rules.yml": yaml.safe_dump(rules, sort_keys=False), TOKEN_FILE: TOKEN},
        )
        prometheus.wait_ready()

        # It scrapes with the token, and evaluates every shipped rule without error.
        wait_for(lambda: target_up(prometheus), "the target to be up", WAIT)
        evaluated = wait_for(lambda: rules_evaluated(prometheus), "every rule evaluated", WAIT)
        assert {rule["name"] for rule in evaluated} == {
            rule["alert"] for rule in alert_rules(yaml.safe_load(ALERTS.read_text()))
        }
        assert not active(prometheus, UNKNOWN_ALERT, "pending")
        assert not active(prometheus, UNKNOWN_ALERT)
        ready_at = time.monotonic()

        answer = requests.post(
            f"{web.url}/v1/refunds",
            data={"charge": charge.pk, "amount": "1000"},
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["ledger_status"] == "unknown"  # "pending" in Stripe's words
        refund_id = answer.json()["id"]
        unknown_at = time.monotonic()

        (fired,) = wait_for(lambda: active(prometheus, UNKNOWN_ALERT), "the alert to fire", WAIT)
        fired_at = time.monotonic()
        assert fired["labels"] == {"alertname": UNKNOWN_ALERT, "job": JOB, "severity": "critical"}
        assert float(fired["value"]) > 2
        assert (
            fired["annotations"]["runbook"] == "docs/operating/metrics.md#refundunknownoveranhour"
        )
        # The provider's timeout, counted by a gunicorn worker into the shared directory,
        # makes the error-ratio alert fire too: the one refund call made failed.
        (errors,) = wait_for(
            lambda: active(prometheus, "ProviderErrors"), "ProviderErrors to fire", WAIT
        )
        assert errors["labels"]["operation"] == "refund"

        settling_at = time.monotonic()
        settled = run_command("reconcile")
        assert settled.returncode == 0, settled.stdout + settled.stderr
        assert Refund.objects.get(pk=refund_id).status == Refund.Status.SUCCEEDED

        wait_for(
            lambda: (
                not active(prometheus, UNKNOWN_ALERT)
                and not active(prometheus, UNKNOWN_ALERT, "pending")
            ),
            "the alert to resolve",
            WAIT,
        )
        resolved_at = time.monotonic()
    finally:
        if prometheus is not None:
            prometheus.stop()
        web.stop()

    # What the run took, for docs/operating/metrics.md (printed with -s).
    print(
        f"\nservers up and every rule evaluated {ready_at - started:.1f}s; "
        f"fired {fired_at - unknown_at:.1f}s after the refund went unknown; "
        f"resolved {resolved_at - settling_at:.1f}s after reconcile started"
    )
