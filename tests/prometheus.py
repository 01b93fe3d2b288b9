"""The shipped Prometheus files (deploy/prometheus/), Debian's promtool and server, and a
real Prometheus on a loopback port of its own for the tests that need one."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.processes import ROOT, ServerProcess, free_loopback_port

DEPLOY = ROOT / "deploy" / "prometheus"
ALERTS = DEPLOY / "alerts.yml"
ALERTS_TEST = DEPLOY / "alerts_test.yml"
SCRAPE_CONFIG = DEPLOY / "prometheus.yml"
# prometheus.yml's credentials_file, read from the config's own directory.
TOKEN_FILE = "metrics-token"
JOB = "refund-backoffice"


def binary(name: str) -> str | None:
    """promtool or prometheus: PROMTOOL_PATH / PROMETHEUS_PATH, else the one on PATH."""
    given = os.environ.get(f"{name.upper()}_PATH")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which(name)


def alert_rules(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def shortened_rules(*, thresholds: dict[str, tuple[str, str]], wait: str = "2s") -> dict[str, Any]:
    """alerts.yml as shipped, but every `for:` cut to `wait` and, for each alert named in
    `thresholds`, the comparison `old` in its expression replaced by `new`: the shipped
    expressions, evaluated in seconds instead of hours. An `old` that is not in the
    expression exactly once is an error, so a changed alerts.yml cannot go untested."""
    rules = yaml.safe_load(ALERTS.read_text())
    for rule in alert_rules(rules):
        if "for" in rule:
            rule["for"] = wait
        if rule["alert"] in thresholds:
            old, new = thresholds[rule["alert"]]
            assert rule["expr"].count(old) == 1, f"{rule['alert']}: {old!r} in {rule['expr']!r}"
            rule["expr"] = rule["expr"].replace(old, new)
    missing = set(thresholds) - {rule["alert"] for rule in alert_rules(rules)}
    assert not missing, f"no such alerts in {ALERTS}: {missing}"
    return rules


def scrape_config(*, target: str, rule_file: str, every: str) -> dict[str, Any]:
    """prometheus.yml as shipped, scraping `target` only, every `every`, with `rule_file`:
    its job, path, scheme and bearer-token authorization unchanged."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"].update(scrape_interval=every, scrape_timeout=every, evaluation_interval=every)
    config["rule_files"] = [rule_file]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == JOB]
    job["static_configs"] = [{"targets": [target]}]
    return config


class PrometheusServer(ServerProcess):
    """Prometheus on a free 127.0.0.1 port, its data in `directory`, with `config`
    (written there beside `files`, name -> text, which it may name relatively)."""

    name = "prometheus"

    def __init__(
        self, executable: str, directory: Path, *, config: dict[str, Any], files: dict[str, str]
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)
        config_file = directory / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(directory / "prometheus.log")
        self.process = subprocess.Popen(
            [
                executable,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )

    def wait_ready(self, timeout: float = 30) -> None:
        self.wait_answering(f"{self.url}/-/ready", 200, timeout)

    def api(self, path: str) -> Any:
        """The `data` of GET /api/v1/<path>, which must have succeeded."""
        answer = requests.get(f"{self.url}/api/v1/{path}", timeout=10)
        body = answer.json()
        assert answer.status_code == 200 and body["status"] == "success", body
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (pending or firing) as Prometheus's own API lists them."""
        return self.api("alerts")["alerts"]


def wait_for(condition, what: str, timeout: float, every: float = 0.25):
    """condition()'s first truthy answer, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
