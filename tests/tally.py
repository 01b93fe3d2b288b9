"""Counts of what the reliability suites did: operations run, faults injected, invariant
checks passed, model examples and hostile inputs tried. Printed at the end of a test run;
`make soak` also writes them to $LEDGER_TALLY_FILE.

`scale(ci, soak)` is how a suite picks its size: the CI number normally, the soak number
when LEDGER_SOAK is set, or LEDGER_<NAME> when given explicitly.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter

KINDS = ("operations", "faults", "invariant_checks", "model_examples", "bad_inputs")

_lock = threading.Lock()
_counts: dict[str, Counter] = {}


def add(suite: str, **counts: int) -> None:
    """Add to a suite's counts, e.g. add("load", operations=5000, invariant_checks=1)."""
    unknown = set(counts) - set(KINDS)
    assert not unknown, f"unknown tally kinds: {unknown}"
    with _lock:
        _counts.setdefault(suite, Counter()).update(counts)


def totals() -> dict[str, dict[str, int]]:
    with _lock:
        return {suite: dict(counter) for suite, counter in sorted(_counts.items())}


def soaking() -> bool:
    return os.environ.get("LEDGER_SOAK", "").strip().lower() in {"1", "true", "yes"}


def scale(name: str, ci: int, soak: int) -> int:
    explicit = os.environ.get(f"LEDGER_{name.upper()}")
    if explicit:
        return int(explicit)
    return soak if soaking() else ci


def write_report(lines: list[str]) -> None:
    path = os.environ.get("LEDGER_TALLY_FILE")
    if not path:
        return
    existing: dict[str, dict[str, int]] = {}
    if os.path.exists(path):
        with open(path) as f:
            existing = json.load(f)
    for suite, counts in totals().items():
        merged = Counter(existing.get(suite, {}))
        merged.update(counts)
        existing[suite] = dict(merged)
    with open(path, "w") as f:
        json.dump(existing, f, indent=2, sort_keys=True)
    lines.append(f"tally added to {path}")


def summary_lines() -> list[str]:
    rows = totals()
    if not rows:
        return []
    lines = [f"{'suite':<14}" + "".join(f"{k:>18}" for k in KINDS)]
    for suite, counts in rows.items():
        lines.append(f"{suite:<14}" + "".join(f"{counts.get(k, 0):>18,}" for k in KINDS))
    return lines
