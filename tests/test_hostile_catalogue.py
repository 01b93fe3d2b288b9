"""The hostile-input catalogues themselves: big enough, well formed, honest about what they
skip; the boundary catalogue (hostile_boundaries.json) names tests that exist and run."""

import importlib
import json
from collections import Counter
from pathlib import Path

import pytest

from tests import hostile

OUTCOMES = {"code", "status", "accept", "skip"}


def test_every_entry_is_well_formed():
    ids = [entry["id"] for entry in hostile.ENTRIES]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for entry in hostile.ENTRIES:
        assert {"id", "field", "kind", "value", *hostile.SURFACES} <= set(entry), entry["id"]
        for surface in hostile.SURFACES:
            spec = entry[surface]
            outcomes = {"refused" if o in ("code", "status") else o for o in OUTCOMES & set(spec)}
            assert len(outcomes) == 1, (entry["id"], surface, spec)
            if "skip" in spec:
                assert spec["skip"].strip(), (entry["id"], surface, "say why it does not apply")


def test_the_catalogue_is_big_enough_on_every_surface():
    applies = {s: len(hostile.cases(s)) for s in hostile.SURFACES}
    assert len(hostile.ENTRIES) >= 60
    assert applies["api"] >= 60, applies
    assert applies["admin"] >= 25 and applies["command"] >= 25, applies
    for surface in hostile.SURFACES:
        accepted = [c for c in hostile.cases(surface) if c.values[0].accepted]
        assert len(accepted) >= 3, (surface, "hostile text that is legitimate must be tried")


def test_it_covers_the_kinds_of_attack():
    kinds = Counter(entry["kind"] for entry in hostile.ENTRIES)
    for kind in [
        "wrong type",
        "bounds",
        "unicode digits",
        "unicode",
        "control",
        "oversize",
        "brackets",
        "duplicated",
        "sql",
        "html",
        "unknown id",
        "path",
        "namespace",
    ]:
        assert kinds[kind] >= 1, kind


BOUNDARIES = {
    "egress",
    "admin lookups",
    "client address",
    "admin writes",
    "provider events",
    "limits",
    "ownership",
    "api input",
    "webhook endpoints",
    "metrics",
    "logs",
    "files we write",
    "configuration",
    "serving",
}


def _boundary_tests() -> list[tuple[str, str]]:
    catalogue = json.loads((Path(__file__).parent / "hostile_boundaries.json").read_text())
    return [(entry["id"], node) for entry in catalogue["entries"] for node in entry["tests"]]


def test_the_boundary_catalogue_covers_every_boundary_with_its_one_guard():
    catalogue = json.loads((Path(__file__).parent / "hostile_boundaries.json").read_text())
    ids = [entry["id"] for entry in catalogue["entries"]]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert {entry["boundary"] for entry in catalogue["entries"]} == BOUNDARIES
    root = Path(__file__).parent.parent
    for entry in catalogue["entries"]:
        assert (root / entry["guard"]).is_file(), (entry["id"], entry["guard"])
        assert entry["attack"].strip() and entry["tests"], entry["id"]


def _marks(owner: object) -> list:
    marks = getattr(owner, "pytestmark", [])
    return list(marks) if isinstance(marks, list) else [marks]


@pytest.mark.parametrize(("entry", "node"), _boundary_tests())
def test_each_boundary_case_is_a_test_that_runs(entry, node):
    path, *names = node.split("::")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    owner: object = module
    marks = _marks(module)
    for name in names:
        owner = getattr(owner, name, None)
        assert owner is not None, (entry, node, f"no {name}")
        marks += _marks(owner)
    assert callable(owner) and names[-1].startswith("test_"), (entry, node)
    assert not [m for m in marks if m.name in ("skip", "xfail")], (entry, node, "never run")
