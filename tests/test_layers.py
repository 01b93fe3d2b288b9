"""The layers and the domains (docs/architecture.md, "Rules the tools enforce") are
import-linter contracts in pyproject.toml, indirect imports included: `make test` runs
`lint-imports` before the suite, and these tests prove the contracts hold and would fail."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("backoffice", "ledger_app", "serving", "simulated_provider")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # the venv's own lint-imports
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The packages and the contracts, copied where a test may plant a bad import."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_every_contract_is_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")


def plant(root: Path, module: str, line: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # A service reaching up into the API, directly.
        (
            "ledger_app.refunds.services",
            "from ledger_app.api import views  # noqa",
            "Nothing below the interfaces imports the admin, the API or the commands",
        ),
        # A model that reads through its own room's selectors.
        (
            "ledger_app.refunds.models",
            "from ledger_app.refunds import selectors  # noqa",
            "Within each room: services over selectors over models",
        ),
        # A selector that reaches a service through a shared module (indirectly).
        (
            "ledger_app.paging",
            "from ledger_app.refunds import bulk  # noqa",
            "Models and selectors import no service, no rendering",
        ),
        (
            "ledger_app.charges.models",
            "from ledger_app.refunds import bulk  # noqa",
            "Models and selectors import no service, no rendering",
        ),
        (
            "ledger_app.rendering.payment_intents",
            "from ledger_app.events import endpoints  # noqa",
            "Rendering reads models and selectors only: it calls no service",
        ),
        (
            "simulated_provider.news",
            "from ledger_app import ids  # noqa",
            "The simulated provider imports nothing from the back office",
        ),
        (
            "serving.logs",
            "from ledger_app.refunds import models  # noqa",
            "The serving process's parts know no domain",
        ),
        # A lower domain calling a higher one's service.
        (
            "ledger_app.events.services",
            "from ledger_app.refunds import services  # noqa",
            "The domains, by what their services call",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(tree_copy, module, line, contract):
    plant(tree_copy, module, line)
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert contract in broken
