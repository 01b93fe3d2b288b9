"""The hostile-input catalogue itself: big enough, well formed, honest about what it skips."""

from collections import Counter

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
