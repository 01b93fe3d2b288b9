"""The shipped Prometheus files (deploy/prometheus/), and Debian's promtool and server."""

from __future__ import annotations

import os
import shutil
from typing import Any

from tests.processes import ROOT

DEPLOY = ROOT / "deploy" / "prometheus"
ALERTS = DEPLOY / "alerts.yml"
ALERTS_TEST = DEPLOY / "alerts_test.yml"
SCRAPE_CONFIG = DEPLOY / "prometheus.yml"
# prometheus.yml's credentials_file, read from the config's own directory.
TOKEN_FILE = "metrics-token"


def binary(name: str) -> str | None:
    """promtool or prometheus: PROMTOOL_PATH / PROMETHEUS_PATH, else the one on PATH."""
    given = os.environ.get(f"{name.upper()}_PATH")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which(name)


def alert_rules(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
