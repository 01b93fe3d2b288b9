"""Debian's promtool and Prometheus server for the alert tests, and Debian's nginx for the
serving tests: without them those tests skip loudly, and under CI=true they fail instead
(as the browser tests do without chromium). `.ci/run` installs them: `apt-get install
prometheus nginx-light`."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import IN_CI
from tests.prometheus import binary

_skipped: list[str] = []
_skipped_nginx: list[str] = []


def _binary_or_skip(name: str) -> str:
    found = binary(name)
    if found is None:
        reason = (
            f"NEEDS PROMETHEUS: no {name} (on PATH, or at {name.upper()}_PATH). These tests "
            "prove that deploy/prometheus/'s rules load, fire and resolve, and prove nothing "
            "until they run. Install Debian's package: `apt-get install prometheus` "
            "(.ci/run does)."
        )
        if IN_CI:
            pytest.fail(f"CI=true and the alert tests cannot run. {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def promtool() -> str:
    return _binary_or_skip("promtool")


@pytest.fixture(scope="session")
def prometheus_server_binary() -> str:
    return _binary_or_skip("prometheus")


@pytest.fixture(scope="session")
def nginx_binary() -> str:
    """Debian's nginx (on PATH, or /usr/sbin/nginx, which is not on a user's PATH)."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )
    if found is None:
        reason = (
            "NEEDS NGINX: no nginx (command -v nginx). These tests prove that "
            "deploy/nginx/backoffice.conf holds off slow clients, and prove nothing until they "
            "run. Install Debian's package: `apt-get install --no-install-recommends "
            "nginx-light` (.ci/run does)."
        )
        if IN_CI:
            pytest.fail(f"CI=true and the serving tests cannot run. {reason}")
        pytest.skip(reason)
    return found


def pytest_runtest_logreport(report):
    if report.skipped and "NEEDS PROMETHEUS" in str(report.longrepr):
        _skipped.append(report.nodeid)
    if report.skipped and "NEEDS NGINX" in str(report.longrepr):
        _skipped_nginx.append(report.nodeid)


def pytest_terminal_summary(terminalreporter):
    if _skipped:
        terminalreporter.section("NOT PROVEN: alert tests skipped", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(_skipped)} alert tests were skipped for want of promtool or prometheus; "
            "`apt-get install prometheus` and run them again.",
            red=True,
        )
    if _skipped_nginx:
        terminalreporter.section("NOT PROVEN: serving tests skipped", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(_skipped_nginx)} serving tests were skipped for want of nginx; "
            "`apt-get install --no-install-recommends nginx-light` and run them again.",
            red=True,
        )
