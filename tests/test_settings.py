from django.conf import settings
from django.db import connection


def test_sqlite_takes_the_write_lock_at_begin():
    db = settings.DATABASES["default"]
    if connection.vendor != "sqlite":
        assert db["ENGINE"] == "django.db.backends.postgresql"
        return
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["TEST"]["NAME"].endswith(".sqlite3")  # a file: threads share it


def test_services_own_their_transactions():
    assert settings.DATABASES["default"]["ATOMIC_REQUESTS"] is False
