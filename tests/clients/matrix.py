"""The client matrix's four clients (test_client_matrix.py): where each is installed,
which lock pins it, how to run the scenario with it, and why it cannot run here."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import stripe
from cryptography.fernet import Fernet

from tests.conftest import IN_CI
from tests.processes import BIN, ROOT

HERE = Path(__file__).resolve().parent
INSTALLED = BIN.parent / "clients"  # the Makefile's $(CLIENTS)
NODE_MODULES = INSTALLED / "node" / "node_modules"
PYTHON_OLDER = INSTALLED / "python-stripe-older"
# The served instance, deliver_webhooks and the test process encrypt webhook signing
# secrets under this one key (each would otherwise derive one from its own secret key).
WEBHOOK_KEY = Fernet.generate_key().decode()


def python_pin(lock: Path) -> str:
    found = re.search(r"^stripe==(\S+)", lock.read_text(), re.MULTILINE)
    assert found, f"{lock} pins no stripe"
    return found[1]


def source_constant(path: Path, pattern: str) -> str:
    """A value the installed package's own source sets (its pinned API version)."""
    found = re.search(pattern, path.read_text()) if path.is_file() else None
    assert found, f"no {pattern!r} in {path}"
    return found[1]


@dataclass(frozen=True)
class Client:
    name: str  # python-newest, node-older, ...
    language: str
    package: str  # Python: the folder the package is imported from; Node: its npm alias

    @property
    def python_path(self) -> Path:
        return Path(stripe.__file__).parent.parent if self.name == "python-newest" else PYTHON_OLDER

    def locked_version(self) -> str:
        if self.name == "python-newest":
            return python_pin(ROOT / "requirements" / "dev.txt")
        if self.name == "python-older":
            return python_pin(ROOT / "requirements" / "clients" / "stripe-python-older.txt")
        lock = json.loads((HERE / "package-lock.json").read_text())
        return lock["packages"][f"node_modules/{self.package}"]["version"]

    def pinned_api_version(self) -> str:
        if self.language == "python":
            path = self.python_path / "stripe" / "_api_version.py"
            return source_constant(path, r'CURRENT\s*=\s*"([^"]+)"')
        path = NODE_MODULES / self.package / "cjs" / "apiVersion.js"
        return source_constant(path, r"ApiVersion\s*=\s*'([^']+)'")

    def missing(self) -> str | None:
        """Why this client cannot run here, or None."""
        if self.language == "python":
            if self.name == "python-older" and not (PYTHON_OLDER / ".installed").is_file():
                return f"{PYTHON_OLDER} is not installed (make test installs it)"
            return None
        if shutil.which("node") is None:
            return "no `node` on PATH (`apt-get install nodejs npm`; .ci/run does)"
        if not (NODE_MODULES / self.package / "package.json").is_file():
            return f"{NODE_MODULES / self.package} is not installed (make test runs npm ci)"
        return None

    def command(self, mode: str) -> list[str]:
        if self.language == "python":
            return [str(BIN / "python"), str(HERE / "scenario.py"), mode]
        return [str(shutil.which("node")), str(HERE / "scenario.js"), mode]

    def env(self) -> dict[str, str]:
        if self.language == "python":
            # Only for the older one: its folder comes before the venv's site-packages.
            return {"PYTHONPATH": str(PYTHON_OLDER)} if self.name == "python-older" else {}
        return {"NODE_PATH": str(NODE_MODULES), "STRIPE_PACKAGE": self.package}


MATRIX = [
    Client("python-newest", "python", "stripe"),
    Client("python-older", "python", "stripe"),
    Client("node-newest", "node", "stripe-newest"),
    Client("node-older", "node", "stripe-older"),
]


def require(client: Client) -> None:
    """A loud skip when `client` cannot run here; under CI=true a failure instead."""
    why = client.missing()
    if why is None:
        return
    reason = f"NEEDS THE {client.name.upper()} CLIENT: {why}. It proves nothing until it runs."
    if IN_CI:
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)
