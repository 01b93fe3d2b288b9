"""Running manage.py commands as real processes against the test database."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import requests
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


BIN = Path(sys.executable).parent


def env_file(path: Path) -> dict[str, str]:
    """The NAME=value lines of an environment file such as deploy/production.env, as
    `set -a; . FILE` would export them (comments and blank lines skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def run_alone(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`command` in the project with nothing of this run's environment but PATH and HOME
    (no secret key or database inherited from the test run)."""
    base = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}
    return subprocess.run(
        command, cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def manage_alone(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """manage.py as run_alone runs it."""
    return run_alone([str(BIN / "python"), "manage.py", *args], env)


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


def gunicorn_env(port: int, workers: int, threads: int, **env: str) -> dict[str, str]:
    """gunicorn's environment in the tests: production mode against the test database,
    `workers` x `threads` on 127.0.0.1:`port`, and no rate limit to hit unless the test
    is about it (`env` overrides any of it)."""
    return command_env(
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="test-server-secret-key-not-for-production",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        LEDGER_GATEWAY="simulated",
        WEB_CONCURRENCY=str(workers),
        GUNICORN_THREADS=str(threads),
        GUNICORN_BIND=f"127.0.0.1:{port}",
        **{"API_RATE_LIMIT": "1000000/second", **env},
    )


def start_command(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=command_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_command(
    *args: str,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    **more_env: str,
) -> subprocess.CompletedProcess:
    """`env` and `more_env`: the variables to set (a dict of them is given as `env`);
    `input`: what the command reads on its standard input."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        input=input,
        cwd=ROOT,
        env=command_env(**(env or {}), **more_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_command_logged(log: Path, *args: str, **env: str) -> subprocess.Popen:
    """manage.py `args` in a process of its own, everything it prints in `log`: a file, not
    a pipe, which nobody reads and which a storm of logged tracebacks would fill, stopping
    the command."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=command_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def kill_at(point: str, *args: str, **env: str) -> subprocess.Popen:
    """Run a manage.py command until it reaches the fault point `point`, then SIGKILL it."""
    process = start_command(*args, LEDGER_FAULT_HANG_AT=point, **env)
    assert process.stderr is not None  # start_command pipes it
    try:
        said = []  # log lines the command wrote before it reached the point
        while True:
            line = process.stderr.readline()  # blocks until a line or the process ends
            if not line or f"fault point reached: {point}" in line:
                break
            said.append(line)
        assert line, "the command ended before the fault point:\n" + "".join(said)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == -signal.SIGKILL
    return process


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A server a test starts: its process, everything it prints in one file, and the ways
    to wait until it answers, stop it and read what it said."""

    name = "server"
    process: subprocess.Popen

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()

    def wait_answering(self, url: str, status: int, timeout: float) -> None:
        """Until a GET of `url` answers `status`; the server's output if it exits first or
        never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log()}")
            try:
                if requests.get(url, timeout=2).status_code == status:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise AssertionError(
            f"{self.name}: {url} did not answer {status} in {timeout}s:\n{self.log()}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if not self._log.closed:
            self._log.close()

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


class GunicornServer(ServerProcess):
    """gunicorn as `make run` serves (gunicorn.conf.py: gthread workers), on a free
    loopback port, against the test database; `env` overrides its environment."""

    name = "gunicorn"

    def __init__(
        self,
        tmp_path: Path,
        *,
        workers: int,
        threads: int,
        own_group: bool = False,
        env: Mapping[str, str] | None = None,
        **more_env: str,
    ) -> None:
        """`own_group`: in a process group of its own, so kill() takes master and workers
        down at once, as a machine that loses power would. `env` and `more_env`: the
        variables to set (a dict of them is given as `env`)."""
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(tmp_path / "gunicorn.stderr")
        environment = gunicorn_env(self.port, workers, threads, **(env or {}), **more_env)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                str(ROOT / "gunicorn.conf.py"),
                "backoffice.wsgi",
                "--keep-alive",
                "75",  # longer than any pause, so no idle connection is closed under a client
                "--timeout",
                "120",
                "--graceful-timeout",
                "10",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=own_group,
        )
        self.own_group = own_group

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_answering(f"{self.url}/v1/charges", 401, timeout)

    def kill(self) -> None:
        """SIGKILL to the whole server (own_group): no worker finishes what it was doing."""
        assert self.own_group, "kill() needs own_group=True"
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self._log.close()
