import ast

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from backoffice.environment import Environment, env
from tests.processes import ROOT, manage_alone

pytestmark = pytest.mark.any_database


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


@pytest.mark.parametrize(("timeout", "lease"), [("9.5", "10"), ("10", "10"), ("121", "120")])
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


# --- every variable, from the code ------------------------------------------------------

SETTINGS = ROOT / "backoffice" / "settings.py"
CONFIGURATION = ROOT / "docs" / "operating" / "configuration.md"


def variables_read() -> dict[str, str]:
    """Every `env.<kind>("NAME", ...)` in settings.py, as {NAME: kind}."""
    found = {}
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
        ):
            name = node.args[0]
            assert isinstance(name, ast.Constant) and isinstance(name.value, str), ast.unparse(node)
            found[name.value] = node.func.attr
    return found


READ = variables_read()
# A value each kind refuses; text and comma-separated names take anything. A new kind
# fails test_every_kind_has_a_bad_value until it is given one here.
BAD = {
    "switch": "maybe",
    "count": "ten",
    "number": "ten",
    "choice": "nonsense",
    "url": "ftp://example.com/hook",
    "rate": "ten",
    "time_zone": "Mars/Olympus_Mons",
    "fernet_keys": "not-a-fernet-key",
    "amounts": "usd=ten",
    # A password in it, which the refusal must not print.
    "database": "postgres://refunds:hunter2-secret@db.internal:port/refunds",
}
ANYTHING_GOES = {"text", "names"}
TYPED = sorted(name for name, kind in READ.items() if kind not in ANYTHING_GOES)


def test_the_settings_read_the_environment_through_env_alone():
    tree = ast.parse(SETTINGS.read_text())
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not names & {"os", "environ", "getenv"}
    # Everything is read on every start, by its literal name: what the walk below finds is
    # what a start reads (nothing read only on PostgreSQL, or only when another is set).
    assert env.kinds == READ
    assert len(TYPED) >= 45


def test_every_kind_has_a_bad_value():
    assert set(READ.values()) - ANYTHING_GOES <= set(BAD)


def test_every_variable_is_documented_in_configuration_md():
    documented = CONFIGURATION.read_text()
    assert [name for name in READ if f"`{name}`" not in documented] == []


@pytest.mark.parametrize("name", TYPED)
def test_a_bad_value_of_any_variable_stops_the_start_with_one_line_naming_it(tmp_path, name):
    bad = BAD[READ[name]]
    env = {
        "DJANGO_DEBUG": "true",
        "DJANGO_SECRET_KEY": "test-settings-key",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-written.sqlite3'}",
        name: bad,
    }

    result = manage_alone("check", env=env)

    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"error: {name} "), result.stderr
    assert "hunter2" not in result.stderr and "not-a-fernet-key" not in result.stderr
    assert not (tmp_path / "never-written.sqlite3").exists()


# --- the reader's rules (backoffice/environment.py) ---------------------------------------


@pytest.fixture
def reader():
    return Environment()


def test_unset_or_empty_is_the_default(reader, monkeypatch):
    monkeypatch.setenv("SETTINGS_TEST_EMPTY", "  ")
    monkeypatch.delenv("SETTINGS_TEST_UNSET", raising=False)

    assert reader.count("SETTINGS_TEST_EMPTY", 7, of="days", high=9) == 7
    assert reader.switch("SETTINGS_TEST_EMPTY", True) is True
    assert reader.number("SETTINGS_TEST_UNSET", 2, of="seconds", high=600) == 2.0
    assert reader.names("SETTINGS_TEST_UNSET", "a, b,,") == ["a", "b"]
    read = reader.database("SETTINGS_TEST_EMPTY", "sqlite:////tmp/the-default.sqlite3")
    assert read["NAME"] == "/tmp/the-default.sqlite3"  # noqa: S108 - a name, never opened


def test_an_empty_choice_names_no_option_and_is_refused_unless_empty_is_the_default(
    reader, monkeypatch
):
    monkeypatch.setenv("SETTINGS_TEST_CHOICE", "")
    options = ("simulated", "stripe")

    with pytest.raises(ImproperlyConfigured) as refused:
        reader.choice("SETTINGS_TEST_CHOICE", "simulated", options)
    read = reader.choice("SETTINGS_TEST_CHOICE", "simulated", options, empty_is_default=True)

    assert str(refused.value) == "SETTINGS_TEST_CHOICE must be simulated or stripe, not ''"
    assert read == "simulated"


@pytest.mark.parametrize("value", ["1_6", "+8", "١", "1e1", "nan", "inf", "0", "600.5", ".5"])
def test_a_number_is_ascii_digits_within_its_bounds(reader, monkeypatch, value):
    monkeypatch.setenv("SETTINGS_TEST_NUMBER", value)

    with pytest.raises(ImproperlyConfigured) as refused:
        reader.number("SETTINGS_TEST_NUMBER", 2, of="seconds", high=600)

    assert str(refused.value) == (
        "SETTINGS_TEST_NUMBER must be a number of seconds above 0, at most 600 "
        f"(such as 2 or 0.5), not {value!r}"
    )


@pytest.mark.parametrize(("value", "read"), [(" 0.25 ", 0.25), ("0", 0.0), ("600", 600.0)])
def test_a_number_may_have_a_fraction_and_may_be_zero_when_allowed(
    reader, monkeypatch, value, read
):
    monkeypatch.setenv("SETTINGS_TEST_NUMBER", value)

    assert reader.number("SETTINGS_TEST_NUMBER", 2, of="seconds", high=600, zero=True) == read


def test_a_refused_value_is_quoted_back_cut_at_40_characters(reader, monkeypatch):
    monkeypatch.setenv("SETTINGS_TEST_SWITCH", "x" * 100)

    with pytest.raises(ImproperlyConfigured) as refused:
        reader.switch("SETTINGS_TEST_SWITCH", False)

    assert str(refused.value) == f"SETTINGS_TEST_SWITCH must be true or false, not {'x' * 40!r}"


@pytest.mark.parametrize(
    ("value", "read"),
    [("usd=5000000, JPY = 1000000", {"usd": 5_000_000, "jpy": 1_000_000}), ("", {})],
)
def test_amount_ceilings_are_currency_amount_pairs(reader, monkeypatch, value, read):
    monkeypatch.setenv("SETTINGS_TEST_AMOUNTS", value)

    assert reader.amounts("SETTINGS_TEST_AMOUNTS") == read


@pytest.mark.parametrize(
    "value", ["usd", "usd=0", "usd=-5", "=5", "usd=5;jpy=6", "usd=1000000000000"]
)
def test_an_amount_ceiling_that_is_not_a_pair_is_refused(reader, monkeypatch, value):
    monkeypatch.setenv("SETTINGS_TEST_AMOUNTS", value)

    with pytest.raises(ImproperlyConfigured, match="must be currency=amount pairs"):
        reader.amounts("SETTINGS_TEST_AMOUNTS")


HUGE = "9" * 5_000  # int() raises ValueError on it: that would be a traceback, not one line


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (HUGE, lambda reader: reader.count("SETTINGS_TEST_HUGE", 1, of="days", high=9)),
        (f"{HUGE}/second", lambda reader: reader.rate("SETTINGS_TEST_HUGE", "1/second")),
        (f"usd={HUGE}", lambda reader: reader.amounts("SETTINGS_TEST_HUGE")),
    ],
    ids=["count", "rate", "amounts"],
)
def test_a_number_too_long_to_read_is_refused_like_any_bad_value(reader, monkeypatch, value, read):
    monkeypatch.setenv("SETTINGS_TEST_HUGE", value)

    with pytest.raises(ImproperlyConfigured, match="^SETTINGS_TEST_HUGE must be "):
        read(reader)
