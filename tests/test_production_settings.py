"""Production mode from the environment: what refuses to start, what `check --deploy`
says under the documented production environment, and the headers every response wears.

The start-up tests run manage.py and gunicorn as an operator would, in a fresh process
with only the environment given (no secret key inherited from the test run)."""

from __future__ import annotations

import base64
import re
import secrets

import pytest
from cryptography.fernet import Fernet

from backoffice.production_secrets import MINIMUM_LENGTHS
from tests.processes import BIN, ROOT, env_file, manage_alone, run_alone

PRODUCTION_ENV = ROOT / "deploy" / "production.env"


def documented_environment() -> dict[str, str]:
    """deploy/production.env as docs/operating/production.md tells an operator to fill it
    in: each placeholder replaced by a secret of one's own."""
    values = env_file(PRODUCTION_ENV)
    values["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    values["WEBHOOK_SECRET_KEYS"] = Fernet.generate_key().decode()
    values["STRIPE_API_KEY"] = "rk_live_" + secrets.token_hex(24)
    values["STRIPE_WEBHOOK_SECRET"] = "whsec_" + secrets.token_hex(24)
    values["METRICS_TOKEN"] = secrets.token_urlsafe(32)
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


@pytest.mark.parametrize("address", ["", "http://refunds.example.com"])
def test_customer_mails_without_an_https_status_page_address_are_warned_of_and_not_sent(
    address,
):
    env = {**documented_environment(), "REFUND_STATUS_BASE_URL": address}

    check = manage_alone("check", "--deploy", "--fail-level", "WARNING", env=env)
    sender = manage_alone("send_customer_mails", "--once", env=env)

    assert check.returncode != 0 and "ledger_app.W270" in check.stderr + check.stdout
    assert sender.returncode == 1
    assert "the mails' status page links would not work" in sender.stderr
    off = {**env, "REFUND_EMAILS": "off"}
    quiet = manage_alone("check", "--deploy", "--fail-level", "WARNING", env=off)
    assert "ledger_app.W270" not in quiet.stderr + quiet.stdout


def test_production_refuses_both_kinds_of_smtp_tls_at_once():
    env = {**documented_environment(), "EMAIL_USE_TLS": "true", "EMAIL_USE_SSL": "true"}

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.startswith("error: EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on")


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
    from ledger_app.access.api_keys import create_api_key

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
    assert result.stderr.startswith("error: WEBHOOK_SECRET_KEYS must be Fernet keys")
    assert "key 1 is not one" in result.stderr
    assert "not-a-fernet-key" not in result.stderr  # the key itself is never printed


# --- secrets that are not secrets (issue 44, finding 9) ---------------------------------

SECRET_NAMES = (*MINIMUM_LENGTHS, "WEBHOOK_SECRET_KEYS")
# In the docs: NAME=value for a secret's name, any Stripe-shaped key or webhook secret
# (sk_..., rk_..., whsec_...), and anything shaped like a Fernet key.
ASSIGNED = re.compile(r"\b(" + "|".join(SECRET_NAMES) + r")=([^\s`\"')]+)")
STRIPE_SHAPED = re.compile(r"(?<![A-Za-z0-9])((?:whsec|sk|rk)_[^\s`\"')\]|,;:]*)")
FERNET_SHAPED = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]{43}=)")


def shipped_secret_values() -> list[tuple[str, str]]:
    """Every secret-looking value the project ships, as (variable, value): each secret of
    every deploy/*.env file, and each example in README.md and docs/."""
    found: set[tuple[str, str]] = set()
    for env in sorted((ROOT / "deploy").glob("*.env")):
        for name, value in env_file(env).items():
            if name in SECRET_NAMES and value:
                found.add((name, value))
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for name, value in ASSIGNED.findall(text):
            if "$" not in value:  # "$(python -c ...)": the command that makes one
                found.add((name, value))
        for value in STRIPE_SHAPED.findall(text):
            name = "STRIPE_WEBHOOK_SECRET" if value.startswith("whsec_") else "STRIPE_API_KEY"
            found.add((name, value))
        for value in FERNET_SHAPED.findall(text):
            found.add(("WEBHOOK_SECRET_KEYS", value))
    return sorted(found)


SHIPPED = shipped_secret_values()


def assert_refused_naming(result, name: str, *values: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"error: {name}"), result.stderr
    for value in values:
        assert value not in result.stderr  # the value itself is never printed


def test_the_shipped_values_are_found():
    names = {name for name, _ in SHIPPED}
    assert names == set(SECRET_NAMES)
    assert len(SHIPPED) >= 10
    assert ("STRIPE_WEBHOOK_SECRET", "whsec_replace") in SHIPPED


def test_production_refuses_to_start_with_deploy_production_env_as_shipped():
    """The finding: every placeholder of the file was accepted as a secret."""
    shipped = env_file(PRODUCTION_ENV)

    result = manage_alone("check", "--deploy", env=shipped)

    assert_refused_naming(result, "DJANGO_SECRET_KEY", shipped["DJANGO_SECRET_KEY"])


@pytest.mark.parametrize(("name", "value"), SHIPPED, ids=[f"{n}={v}" for n, v in SHIPPED])
def test_production_refuses_to_start_on_each_shipped_example(name, value):
    env = {**documented_environment(), name: value}

    result = manage_alone("check", env=env)

    assert_refused_naming(result, name, value)


@pytest.mark.parametrize("name", sorted(MINIMUM_LENGTHS))
def test_production_refuses_a_secret_one_character_too_short(name):
    short = secrets.token_hex(32)[: MINIMUM_LENGTHS[name] - 1]
    env = {**documented_environment(), name: short}

    result = manage_alone("check", env=env)

    assert_refused_naming(result, name, short)
    assert f"needs {MINIMUM_LENGTHS[name]} or more" in result.stderr


def test_production_starts_with_every_secret_at_its_minimum_length():
    env = documented_environment()
    for name, minimum in MINIMUM_LENGTHS.items():
        env[name] = secrets.token_hex(32)[:minimum]

    result = manage_alone("check", env=env)

    assert result.returncode == 0, result.stderr


def test_production_refuses_a_fernet_key_typed_by_hand():
    """A valid Fernet key (32 bytes, url-safe base64) that decodes to text someone typed."""
    typed = base64.urlsafe_b64encode(b"my-very-own-key-typed-by-me-0123").decode()
    env = {
        **documented_environment(),
        "WEBHOOK_SECRET_KEYS": f"{Fernet.generate_key().decode()},{typed}",
    }

    result = manage_alone("check", env=env)

    assert_refused_naming(result, "WEBHOOK_SECRET_KEYS: key 2", typed)


def test_the_demo_mode_is_not_held_to_it(tmp_path):
    env = {
        "DJANGO_DEBUG": "true",
        "ADMIN_OTP_REQUIRED": "false",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "STRIPE_WEBHOOK_SECRET": "whsec_replace",
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 0, result.stderr
