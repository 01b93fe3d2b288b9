"""The client matrix's locks (tests/clients/matrix.py): the newest major of each language
and the one before it, the Node ones with npm's integrity hashes and the older Python one
with pip's, each inside the range its input file names, so that `make lock` alone moves
them to new releases. Nothing here needs a database: one pass (the SQLite one) checks it."""

import json
import re

import pytest
from packaging.requirements import Requirement

from tests.clients.matrix import HERE, MATRIX
from tests.processes import ROOT

pytestmark = pytest.mark.any_database

OLDER_PYTHON = ROOT / "requirements" / "clients" / "stripe-python-older"


def test_each_language_runs_its_newest_major_and_the_one_before():
    versions = {client.name: client.locked_version() for client in MATRIX}
    for language in ("python", "node"):
        newest, older = versions[f"{language}-newest"], versions[f"{language}-older"]
        assert int(newest.split(".")[0]) == int(older.split(".")[0]) + 1, versions


def test_the_node_clients_are_locked_with_integrity_hashes_inside_their_ranges():
    wanted = json.loads((HERE / "package.json").read_text())["dependencies"]
    lock = json.loads((HERE / "package-lock.json").read_text())["packages"]
    assert lock[""]["dependencies"] == wanted  # the lock was made from this package.json
    for client in (client for client in MATRIX if client.language == "node"):
        locked = lock[f"node_modules/{client.package}"]
        assert locked["name"] == "stripe" and locked["integrity"].startswith("sha512-")
        caret = re.fullmatch(r"npm:stripe@\^(\d+)\.(\d+)\.(\d+)", wanted[client.package])
        assert caret, f"{client.package}: {wanted[client.package]} is not npm:stripe@^X.Y.Z"
        floor = tuple(int(part) for part in caret.groups())
        version = tuple(int(part) for part in locked["version"].split("."))
        assert version[0] == floor[0] and version >= floor, (client.package, locked["version"])


def test_the_older_python_client_is_locked_with_hashes_inside_its_range():
    lines = OLDER_PYTHON.with_suffix(".in").read_text().splitlines()
    (wanted,) = [Requirement(line) for line in lines if line.strip() and line[0] != "#"]
    lock = OLDER_PYTHON.with_suffix(".txt").read_text()
    pinned = re.search(r"^stripe==(\S+) \\\n((?:    --hash=sha256:\w+.*\n)+)", lock, re.M)
    assert pinned, "requirements/clients/stripe-python-older.txt pins no stripe with hashes"
    assert wanted.name == "stripe" and wanted.specifier.contains(pinned[1]), pinned[1]
    requirements = re.findall(r"^([A-Za-z0-9_.-]+)==", lock, re.M)
    hashed = re.findall(r"^[A-Za-z0-9_.-]+==[^\n]*\\\n    --hash=sha256:", lock, re.M)
    assert len(hashed) == len(requirements) > 1  # stripe and what it needs, every one hashed
