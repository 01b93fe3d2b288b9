"""docs/operating/production.md, "Try production mode on one machine", followed as a
person would: the environment of deploy/one-machine.env with a secret key of their own,
the database made, a support agent created, gunicorn started; then over plain HTTP the
agent signs in, is asked for the code their authenticator shows (computed from the secret
printed), and refunds a charge of the simulated provider."""

from __future__ import annotations

import re
import secrets
import shlex
import subprocess
import time

import pytest
import requests
from django.contrib.admin.utils import quote

from tests.processes import BIN, ROOT, env_file, free_loopback_port, manage_alone

ONE_MACHINE_ENV = ROOT / "deploy" / "one-machine.env"
CHARGE = "ch_demoUsdUnrefunded000001"  # $12.34, made by seed_demo
# Its database is its own, so it runs once, in the SQLite pass (and collectstatic, into the
# checkout's staticfiles/, is never run by both passes at once).
pytestmark = pytest.mark.any_database


def recipe_environment(tmp_path) -> dict[str, str]:
    """deploy/one-machine.env, sourced, plus the secret key the recipe has you make; the
    database and port moved into this test's own."""
    values = env_file(ONE_MACHINE_ENV)
    assert values["DJANGO_DEBUG"] == "false" and values["ADMIN_OTP_REQUIRED"] == "true"
    assert values["LEDGER_GATEWAY"] == "simulated"
    values["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    values["DATABASE_URL"] = f"sqlite:///{tmp_path / 'try-production.sqlite3'}"
    values["GUNICORN_BIND"] = f"127.0.0.1:{free_loopback_port()}"
    values["SIMULATED_GATEWAY_LATENCY_MS"] = "0"
    return values


def code_from(secret: str) -> str:
    """The code, computed as the recipe says: its one-line command, split as a shell
    would, with the secret as printed (in groups of four)."""
    readme = (ROOT / "docs" / "operating" / "production.md").read_text()
    found = re.search(r"^\.venv/bin/python -c 'import base64.*' ", readme, re.M)
    assert found, "production.md's command for the code"
    argv = [*shlex.split(found.group(0)), *secret.split()]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
    code = done.stdout.strip()
    assert re.fullmatch(r"[0-9]{6}", code), done
    return code


def csrf(page: requests.Response) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def field(page: requests.Response, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page.text)
    assert found, page.text
    return found.group(1)


@pytest.fixture
def served(tmp_path):
    env = recipe_environment(tmp_path)
    for step in (("migrate", "--noinput"), ("collectstatic", "--noinput"), ("seed_demo",)):
        done = manage_alone(*step, env=env)
        assert done.returncode == 0, done.stderr
    agent = manage_alone("create_support_agent", "sam", env=env)
    assert agent.returncode == 0, agent.stderr
    password_found = re.search(r"Support agent: sam / (\S+)", agent.stdout)
    secret_found = re.search(r"secret:\s+([A-Z2-7 ]+?)\s+\(TOTP", agent.stdout)
    assert password_found and secret_found, agent.stdout
    password, secret = password_found.group(1), secret_found.group(1)
    log = (tmp_path / "gunicorn.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "backoffice.wsgi"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        stdout=log,
        stderr=log,
    )
    url = f"http://{env['GUNICORN_BIND']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                # A loaded machine may take a while to answer the first request
                # (the workers import Django then); a slow answer is a retry, not a
                # failure, until the deadline.
                requests.get(f"{url}/admin/login/", timeout=10)
                break
            except (requests.ConnectionError, requests.Timeout):
                assert time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
                time.sleep(0.2)
        yield url, password, secret
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def test_the_recipe_serves_production_mode_over_http_and_asks_for_the_code(served):
    url, password, secret = served
    browser = requests.Session()
    login = browser.get(f"{url}/admin/login/")
    assert "Set-Cookie" in login.headers and "Secure" not in login.headers["Set-Cookie"]
    signed_in = browser.post(
        f"{url}/admin/login/?next=/admin/",
        data={"username": "sam", "password": password, "csrfmiddlewaretoken": csrf(login)},
        headers={"Referer": f"{url}/admin/login/"},
    )
    assert signed_in.url == f"{url}/admin/", signed_in.text[:500]
    # Production mode: no debug page for an unknown URL.
    missing = browser.get(f"{url}/no-such-page/")
    assert missing.status_code == 404 and "DEBUG = True" not in missing.text

    # The password alone does not reach the refund form: the code page does.
    refund_url = f"{url}/admin/ledger_app/charge/{quote(CHARGE)}/refund/"
    asked = browser.get(refund_url)
    assert "/admin/verify/" in asked.url and 'name="code"' in asked.text, asked.url
    verified = browser.post(
        asked.url,
        data={"code": code_from(secret), "csrfmiddlewaretoken": csrf(asked)},
        headers={"Referer": asked.url},
    )
    assert "/refund/" in verified.url and 'id="refund-form"' in verified.text, verified.url

    refunded = browser.post(
        verified.url,
        data={
            "amount": "2.34",
            "reason": "requested_by_customer",
            "note": "",
            "idempotency_key": field(verified, "idempotency_key"),
            "charge_state": field(verified, "charge_state"),
            "csrfmiddlewaretoken": csrf(verified),
            "_refund": "Refund",
        },
        headers={"Referer": verified.url},
    )
    assert refunded.status_code == 200 and "of $2.34: succeeded" in refunded.text, refunded.url
