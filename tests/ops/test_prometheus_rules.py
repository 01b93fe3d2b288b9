"""deploy/prometheus/: promtool accepts the rules and the scrape configuration, every alert
fires on crafted series past its threshold and not below (`promtool test rules`), and each
carries a severity, a summary, what to do and a runbook section that exists. No server:
a real Prometheus is tests/ops/test_alerts_in_prometheus.py's."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from tests.processes import ROOT
from tests.prometheus import ALERTS, ALERTS_TEST, SCRAPE_CONFIG, TOKEN_FILE, alert_rules

RUNBOOK = ROOT / "docs" / "operating" / "metrics.md"
SEVERITIES = {"critical", "warning"}


def promtool_run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, check=False
    )


def alerts() -> list[dict]:
    return alert_rules(yaml.safe_load(ALERTS.read_text()))


class TestPromtool:
    def test_checks_the_rules(self, promtool):
        done = promtool_run(promtool, "check", "rules", str(ALERTS))

        assert done.returncode == 0, done.stdout + done.stderr
        assert f"SUCCESS: {len(alerts())} rules found" in done.stdout

    def test_checks_the_scrape_config_with_its_rules_and_token_file(self, promtool, tmp_path):
        # As deployed: both files in one directory, the token file beside them.
        for path in (SCRAPE_CONFIG, ALERTS):
            shutil.copy(path, tmp_path / path.name)
        (tmp_path / TOKEN_FILE).write_text("a-metrics-token\n")

        done = promtool_run(promtool, "check", "config", str(tmp_path / SCRAPE_CONFIG.name))

        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS: 1 rule files found" in done.stdout

    def test_every_alert_fires_past_its_threshold_and_not_below(self, promtool):
        done = promtool_run(promtool, "test", "rules", str(ALERTS_TEST))

        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout

    def test_the_unit_tests_catch_a_threshold_changed_under_them(self, promtool, tmp_path):
        shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
        text = ALERTS.read_text()
        assert text.count("> 3600") == 1
        (tmp_path / ALERTS.name).write_text(text.replace("> 3600", "> 7200"))

        done = promtool_run(promtool, "test", "rules", str(tmp_path / ALERTS_TEST.name))

        assert done.returncode != 0
        assert "RefundUnknownOverAnHour" in done.stdout + done.stderr


class TestTheRules:
    def test_every_alert_has_a_case_that_fires_and_one_that_does_not(self):
        cases = [
            case
            for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
            for case in test["alert_rule_test"]
        ]

        fires = {case["alertname"] for case in cases if case["exp_alerts"]}
        quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}

        names = {rule["alert"] for rule in alerts()}
        assert len(names) == len(alerts()) >= 8
        assert fires == names
        assert quiet == names

    def test_every_alert_says_how_bad_what_and_what_to_do_with_a_runbook_that_exists(self):
        headings = set(RUNBOOK.read_text().splitlines())

        for rule in alerts():
            name = rule["alert"]
            assert rule["labels"]["severity"] in SEVERITIES, name
            assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
            assert rule["annotations"]["runbook"] == (
                f"{RUNBOOK.relative_to(ROOT)}#{name.lower()}"
            ), name
            assert f"### {name}" in headings, f"{RUNBOOK} has no section for {name}"

    def test_alerts_that_could_flap_wait_before_firing(self):
        # Ages that only grow (unknown refunds) and times that only shrink (an approval's
        # expiry) cannot flap; every other alert needs its condition to hold a while.
        steady = {"RefundUnknownOverAnHour", "RefundApprovalExpiringSoon"}

        waiting = {rule["alert"] for rule in alerts() if "for" in rule}

        assert waiting == {rule["alert"] for rule in alerts()} - steady
