"""`make run` says where it serves: gunicorn.conf.py prints the addresses of the sockets
gunicorn bound (GUNICORN_BIND), never a fixed port, and only in the demo (DEBUG)."""

import importlib.util

import pytest
import requests

from tests import processes
from tests.processes import ROOT, GunicornServer

pytestmark = pytest.mark.django_db(transaction=True)


def conf():
    spec = importlib.util.spec_from_file_location("gunicorn_conf", ROOT / "gunicorn.conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo_server(tmp_path, debug: str) -> GunicornServer:
    """GunicornServer (production mode) with DJANGO_DEBUG as `debug` says."""
    real = processes.command_env
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            processes, "command_env", lambda **env: real(**{**env, "DJANGO_DEBUG": debug})
        )
        return GunicornServer(tmp_path, workers=1, threads=2)


def served(tmp_path, debug: str) -> tuple[GunicornServer, str]:
    server = demo_server(tmp_path, debug)
    try:
        server.wait_ready()
        return server, server.log()
    finally:
        server.stop()


def test_the_demo_prints_the_port_it_bound(tmp_path):
    server, log = served(tmp_path, "true")

    base = f"http://127.0.0.1:{server.port}"
    assert server.port != 8000
    assert f"Serving {base}/admin/ (Ctrl-C stops it)" in log
    assert f"health: {base}/healthz  readiness: {base}/readyz  metrics: {base}/metrics" in log
    assert "127.0.0.1:8000" not in log


def test_the_printed_address_answers(tmp_path):
    server = demo_server(tmp_path, "true")
    try:
        server.wait_ready()
        line = next(line for line in server.log().splitlines() if line.startswith("Serving "))
        admin = line.split()[1]
        assert requests.get(admin, timeout=5, allow_redirects=False).status_code in (200, 302)
    finally:
        server.stop()


def test_production_mode_prints_no_demo_banner(tmp_path):
    _, log = served(tmp_path, "false")

    assert "Serving http" not in log


@pytest.mark.parametrize(
    ("address", "url"),
    [
        (("127.0.0.1", 8123), "http://127.0.0.1:8123"),
        (("0.0.0.0", 9000), "http://127.0.0.1:9000"),  # noqa: S104 - an address shown
        (("::", 9001, 0, 0), "http://[::1]:9001"),
        (("fd00::5", 9002, 0, 0), "http://[fd00::5]:9002"),
        ("/run/backoffice.sock", "unix:/run/backoffice.sock"),
    ],
)
def test_served_urls(address, url):
    assert conf().served_urls([address]) == [url]
