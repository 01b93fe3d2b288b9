"""Running manage.py commands as real processes against the test database."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def test_database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def command_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_FAULT")}
    env.update(
        DATABASE_URL=test_database_url(),
        DJANGO_SETTINGS_MODULE="backoffice.settings",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def start_command(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=command_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_command(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=command_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kill_at(point: str, *args: str, **env: str) -> subprocess.Popen:
    """Run a manage.py command until it reaches the fault point `point`, then SIGKILL it."""
    process = start_command(*args, LEDGER_FAULT_HANG_AT=point, **env)
    try:
        line = process.stderr.readline()  # blocks until the fault point or the process ends
        assert f"fault point reached: {point}" in line, line + process.stderr.read()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == -signal.SIGKILL
    return process
