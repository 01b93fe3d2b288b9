import pytest
from django.conf import settings
from django.db import connection

from tests.processes import manage_alone

pytestmark = pytest.mark.sqlite_pass


def test_sqlite_takes_the_write_lock_at_begin():
    db = settings.DATABASES["default"]
    if connection.vendor != "sqlite":
        assert db["ENGINE"] == "django.db.backends.postgresql"
        return
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["TEST"]["NAME"].endswith(".sqlite3")  # a file: threads share it


def test_services_own_their_transactions():
    assert settings.DATABASES["default"]["ATOMIC_REQUESTS"] is False


RETENTION_SETTINGS = {
    "EVENT_RETENTION_DAYS": 30,
    "PROVIDER_EVENT_RETENTION_DAYS": 90,
    "IDEMPOTENCY_KEY_RETENTION_DAYS": 90,
    "LOGIN_RECORD_RETENTION_DAYS": 90,
    "SIMULATED_PROVIDER_LOG_DAYS": 7,
}


def test_retention_settings_default_to_their_documented_days():
    assert {name: getattr(settings, name) for name in RETENTION_SETTINGS} == RETENTION_SETTINGS


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EVENT_RETENTION_DAYS", "0"),
        ("PROVIDER_EVENT_RETENTION_DAYS", "-5"),
        ("IDEMPOTENCY_KEY_RETENTION_DAYS", "1.5"),
        ("LOGIN_RECORD_RETENTION_DAYS", "ninety"),
        ("SIMULATED_PROVIDER_LOG_DAYS", "36501"),
    ],
)
def test_a_retention_that_is_not_a_positive_whole_number_of_days_stops_the_start(
    tmp_path, name, value
):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-written.sqlite3'}",
        name: value,
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(
        f"error: {name} must be a whole number of days from 1 to 36500, not {value!r}"
    )
    assert not (tmp_path / "never-written.sqlite3").exists()


def test_a_retention_setting_is_read_from_the_environment(tmp_path):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "EVENT_RETENTION_DAYS": " 45 ",
    }

    result = manage_alone(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.EVENT_RETENTION_DAYS)",
        env=env,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "45"


@pytest.mark.parametrize("value", ["1_6", "+8", "eight", "0", "65", "٨"])
def test_webhook_delivery_threads_must_be_plain_digits_from_1_to_64(tmp_path, value):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-written.sqlite3'}",
        "WEBHOOK_DELIVERY_THREADS": value,
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(
        "error: WEBHOOK_DELIVERY_THREADS must be a whole number of lanes from 1 to 64, "
        f"not {value!r}"
    )


@pytest.mark.parametrize(("timeout", "lease"), [("9.5", "10"), ("10", "10"), ("0", "120")])
def test_a_webhook_lease_outlasts_one_whole_request_by_the_margin(tmp_path, timeout, lease):
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-written.sqlite3'}",
        "WEBHOOK_TIMEOUT_SECONDS": timeout,
        "WEBHOOK_LEASE_SECONDS": lease,
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: WEBHOOK_TIMEOUT_SECONDS must be above 0 and at least 1 s below "
        "WEBHOOK_LEASE_SECONDS"
    ), result.stderr
