"""The application's own modules, parsed: for tests that read the code to show that only one
place may do something (reach the provider, open a connection, read the client's address)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger_app", "backoffice", "serving", "simulated_provider")


def application_modules() -> dict[Path, ast.Module]:
    """Every module of the application but its migrations, by path from the checkout."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" not in relative.parts:
                modules[relative] = ast.parse(path.read_text(), filename=str(relative))
    return modules


def imported_modules(tree: ast.Module) -> set[str]:
    """What a module imports: each module, and each `module.name` it imports from one."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names
