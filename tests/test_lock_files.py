"""The installs are locked: requirements/base.txt and dev.txt pin every package, with its
hashes, inside pyproject.toml's ranges; the environment the tests run in is exactly what
they pin; and `make lock` makes such files afresh."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\[\],-]+)==([^ ;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")

# Nothing here depends on the database: one pass (the SQLite one) checks it.
pytestmark = pytest.mark.any_database


def pins(path: Path) -> dict[NormalizedName, tuple[str, str | None, int]]:
    """{name: (version, marker or None, number of hashes)} of a lock file."""
    found: dict[NormalizedName, tuple[str, str | None, int]] = {}
    name = None
    for line in path.read_text().splitlines():
        pinned = PIN.match(line)
        if pinned:
            name = canonicalize_name(pinned[1].split("[")[0])
            found[name] = (pinned[2], pinned[3], 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            pinned_version, marker, hashes = found[name]
            found[name] = (pinned_version, marker, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"{path.name}: a line that is no pin: {line!r}")
    return found


def project_requirements() -> tuple[list[Requirement], list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    build = [
        Requirement(line)
        for line in (ROOT / "requirements" / "build.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    base = [Requirement(r) for r in project["dependencies"]] + build
    return base, base + [Requirement(r) for r in project["optional-dependencies"]["dev"]]


def assert_lock_satisfies(lock_dir: Path) -> None:
    base_needs, dev_needs = project_requirements()
    base, dev = pins(lock_dir / "base.txt"), pins(lock_dir / "dev.txt")
    for needs, lock in ((base_needs, base), (dev_needs, dev)):
        for need in needs:
            name = canonicalize_name(need.name)
            assert name in lock, f"{need} is not in the lock"
            assert need.specifier.contains(lock[name][0], prereleases=True), (need, lock[name])
        assert all(hashes for _, _, hashes in lock.values()), "a pin without a hash"
    for name, pinned in base.items():  # dev installs what base does, at the same versions
        assert dev[name][0] == pinned[0], (name, pinned, dev[name])


def test_the_committed_lock_files_pin_every_dependency_inside_its_range_with_hashes():
    assert_lock_satisfies(ROOT / "requirements")


def test_the_environment_the_tests_run_in_is_what_the_dev_lock_pins():
    pinned = pins(ROOT / "requirements" / "dev.txt")
    wrong = {
        name: (pinned_version, version(name))
        for name, (pinned_version, marker, _) in pinned.items()
        if (marker is None or Marker(marker).evaluate()) and version(name) != pinned_version
    }
    assert not wrong, f"installed versions differ from requirements/dev.txt: {wrong}"


def test_make_lock_makes_lock_files_that_satisfy_pyproject(tmp_path):
    done = subprocess.run(
        [
            shutil.which("make") or "make",
            "lock",
            f"LOCK_DIR={tmp_path}",
            f"LOCK_VENV={tmp_path / 'venv'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_lock_satisfies(tmp_path)
    assert "--generate-hashes" in (tmp_path / "dev.txt").read_text().splitlines()[1]
