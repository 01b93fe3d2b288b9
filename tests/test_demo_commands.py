"""The README's demo commands, run as a new user runs them: in a checkout set up by
`make run` (its set-up step, `make demo`), with nothing in the environment but PATH and
HOME. They run as the demo server does, because `make run` wrote `.env`; a checkout without
`.env` and without a key is as strict as production."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_database

ROOT = Path(__file__).resolve().parent.parent
GIT = shutil.which("git") or "git"
VENV = Path(sys.executable).parent.parent


def checkout_copy(into: Path) -> Path:
    """The project's files as a fresh clone would hold them (this working tree's versions)."""
    listed = subprocess.run(
        [GIT, "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    copy = into / "checkout"
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def bare_environment() -> dict[str, str]:
    """No DJANGO_*, DATABASE_* or demo switch from this run: as a new shell has."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=bare_environment(), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory):
    copy = checkout_copy(tmp_path_factory.mktemp("demo"))
    # This run's venv, as it is: `-o` keeps make from installing the copy into it.
    made = run(["make", "-o", f"{VENV}/.installed", "demo", f"VENV={VENV}"], copy)
    assert made.returncode == 0, made.stdout + made.stderr
    return copy


def manage(copy: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run([str(VENV / "bin" / "python"), "manage.py", *arguments], copy)


class TestInAMakeRunCheckout:
    def test_make_run_writes_the_demo_switches_to_a_git_ignored_env_file(self, demo_checkout):
        written = (demo_checkout / ".env").read_text()
        assert "DJANGO_DEBUG=true" in written
        assert "ADMIN_OTP_REQUIRED=false" in written
        ignored = subprocess.run([GIT, "check-ignore", "-q", ".env"], cwd=ROOT)
        assert ignored.returncode == 0, ".env must be git-ignored"

    def test_create_support_agent_runs_without_prefixes(self, demo_checkout):
        made = manage(demo_checkout, "create_support_agent", "bob")
        assert made.returncode == 0, made.stderr
        assert "bob" in made.stdout

    def test_deliver_webhooks_runs_without_prefixes(self, demo_checkout):
        delivered = manage(demo_checkout, "deliver_webhooks")
        assert delivered.returncode == 0, delivered.stderr

    def test_make_purge_runs_without_prefixes(self, demo_checkout):
        made = run(["make", "-o", f"{VENV}/.installed", "purge", f"VENV={VENV}"], demo_checkout)

        assert made.returncode == 0, made.stdout + made.stderr
        assert "purge_expired: events, older than 30 days: 0 events" in made.stdout
        assert "purge_expired: simulated provider requests, older than 7 days:" in made.stdout

    def test_a_bulk_refund_dry_run_runs_without_prefixes(self, demo_checkout):
        charge = manage(
            demo_checkout,
            "shell",
            "-c",
            "from ledger_app.models import Charge; "
            "print(Charge.objects.filter(status='succeeded', amount_refunded=0).first().pk)",
        ).stdout.split()[-1]
        file = demo_checkout / "refunds.csv"
        file.write_text(f"charge,amount\n{charge},100\n")

        dry = manage(demo_checkout, "bulk_refund", str(file), "--batch-id", "try", "--dry-run")

        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert "would_refund" in dry.stdout

    def test_pytest_runs_without_prefixes(self, demo_checkout):
        collected = run(
            [str(VENV / "bin" / "pytest"), "--collect-only", "-q", "tests/test_settings.py"],
            demo_checkout,
        )
        assert collected.returncode == 0, collected.stdout + collected.stderr
        assert "tests collected" in collected.stdout or "test" in collected.stdout

    def test_the_environment_wins_over_env(self, demo_checkout):
        strict = run(
            [str(VENV / "bin" / "python"), "manage.py", "check"],
            demo_checkout,
        )
        assert strict.returncode == 0, strict.stderr
        env = {**bare_environment(), "DJANGO_DEBUG": "false"}
        refused = subprocess.run(
            [str(VENV / "bin" / "python"), "manage.py", "check"],
            cwd=demo_checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2
        assert "DJANGO_SECRET_KEY is not set" in refused.stderr


def test_without_env_and_without_a_key_it_is_production_and_says_both_ways_out(tmp_path):
    copy = checkout_copy(tmp_path)
    (copy / ".env").unlink(missing_ok=True)

    refused = manage(copy, "check")

    assert refused.returncode == 2
    assert "DJANGO_SECRET_KEY is not set" in refused.stderr
    assert "make run" in refused.stderr  # the demo's way
    assert "Running in production" in refused.stderr  # production's
