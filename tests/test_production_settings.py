"""Production mode from the environment: what refuses to start, what `check --deploy`
says under the documented production environment, and the headers every response wears.

The start-up tests run manage.py and gunicorn as an operator would, in a fresh process
with only the environment given (no secret key inherited from the test run)."""

from __future__ import annotations

import secrets

import pytest

from tests.processes import BIN, ROOT, env_file, manage_alone, run_alone

PRODUCTION_ENV = ROOT / "deploy" / "production.env"


def documented_environment() -> dict[str, str]:
    """deploy/production.env as docs/operating/production.md tells an operator to fill it in."""
    values = env_file(PRODUCTION_ENV)
    values["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    return values


def test_the_documented_production_environment_passes_check_deploy_with_no_warning():
    result = manage_alone(
        "check", "--deploy", "--fail-level", "WARNING", env=documented_environment()
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_about_each_setting_left_out():
    """The check is not blind: the same environment without the hardening fails it."""
    env = documented_environment()
    for name in [
        "DJANGO_SECURE_SSL_REDIRECT",
        "DJANGO_SECURE_COOKIES",
        "DJANGO_SECURE_HSTS_SECONDS",
        "WEBHOOK_SECRET_KEYS",
    ]:
        env.pop(name)

    result = manage_alone("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode != 0
    warnings = ["security.W004", "security.W008", "security.W012", "security.W016"]
    for warning in [*warnings, "ledger_app.W201"]:
        assert warning in result.stderr + result.stdout


def test_production_refuses_to_start_without_a_secret_key_in_one_line():
    env = documented_environment()
    del env["DJANGO_SECRET_KEY"]

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith("error: DJANGO_SECRET_KEY is not set")


def test_gunicorn_refuses_to_start_without_a_secret_key_before_any_worker_boots():
    env = documented_environment()
    del env["DJANGO_SECRET_KEY"]

    result = run_alone([str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "backoffice.wsgi"], env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: DJANGO_SECRET_KEY is not set")


def test_production_refuses_to_switch_the_second_factor_off():
    env = {**documented_environment(), "ADMIN_OTP_REQUIRED": "false"}

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.startswith("error: ADMIN_OTP_REQUIRED=false is only for DJANGO_DEBUG")


def test_the_demo_mode_may_run_without_a_key_and_without_the_second_factor(tmp_path):
    env = {
        "DJANGO_DEBUG": "true",
        "ADMIN_OTP_REQUIRED": "false",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 0, result.stderr


# --- headers every response wears -----------------------------------------------------


def csp_directives(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return {
        part.strip().split(" ", 1)[0]: part.strip().partition(" ")[2]
        for part in header.split(";")
        if part.strip()
    }


@pytest.mark.parametrize("path", ["/admin/login/", "/v1/docs"])
def test_admin_and_api_docs_pages_run_scripts_from_this_site_only(client, path):
    response = client.get(path)

    assert response.status_code == 200
    directives = csp_directives(response)
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert b"<script>" not in response.content  # no inline script the policy would block
    assert b"<style" not in response.content


def test_the_docs_page_start_up_script_is_a_file_of_its_own(client):
    page = client.get("/v1/docs")
    script = client.get("/v1/docs?script=")

    assert b'src="/v1/docs?script=' in page.content
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "auth", "status"),
    [
        ("/v1/charges", "good", 200),
        ("/v1/charges", "wrong", 401),
        ("/v1/charges", None, 401),
        ("/v1/no-such-thing", "good", 404),
        ("/v1/openapi.json", None, 200),
    ],
)
def test_every_api_response_says_no_store(client, path, auth, status):
    from ledger_app.services.api_keys import create_api_key

    _, secret = create_api_key(name="cache-test")
    headers = {}
    if auth == "good":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    elif auth == "wrong":
        headers["HTTP_AUTHORIZATION"] = "Bearer sk_test_wrong"

    response = client.get(path, **headers)

    assert response.status_code == status
    assert "no-store" in response["Cache-Control"]


def test_production_refuses_to_start_with_a_webhook_secret_key_that_is_not_one():
    env = {**documented_environment(), "WEBHOOK_SECRET_KEYS": "not-a-fernet-key"}

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith("error: WEBHOOK_SECRET_KEYS: key 1 is not a Fernet key")
    assert "not-a-fernet-key" not in result.stderr  # the key itself is never printed
