"""Imports point down only (docs/architecture.md): services and selectors never import an
interface (the admin, the API, the commands) or the API's serializers; they render
objects through ledger_app/rendering/snapshots.py, with what to render passed in."""

from pathlib import Path

from tests.source_tree import application_modules, imported_modules

LOWER_LAYERS = ("ledger_app/services", "ledger_app/selectors", "ledger_app/gateways")
INTERFACES = (
    "ledger_app.admin",
    "ledger_app.api",
    "ledger_app.management",
    "ledger_app.rendering.stripe_objects",
)


def upward_imports(modules: dict[Path, object]) -> dict[str, list[str]]:
    found = {}
    for path, tree in modules.items():
        if not path.as_posix().startswith(LOWER_LAYERS):
            continue
        names = sorted(
            name
            for name in imported_modules(tree)
            if any(name == i or name.startswith(i + ".") for i in INTERFACES)
        )
        if names:
            found[path.as_posix()] = names
    return found


def test_no_service_selector_or_gateway_imports_an_interface():
    modules = application_modules()
    assert sum(p.as_posix().startswith(LOWER_LAYERS) for p in modules) > 30
    assert upward_imports(modules) == {}


def test_the_check_finds_an_upward_import():
    import ast

    modules = {
        Path("ledger_app/services/x.py"): ast.parse(
            "from ledger_app.rendering.stripe_objects import plain"
        ),
        Path("ledger_app/api/y.py"): ast.parse("from ledger_app.services import refunds"),
    }
    assert upward_imports(modules) == {
        "ledger_app/services/x.py": [
            "ledger_app.rendering.stripe_objects",
            "ledger_app.rendering.stripe_objects.plain",
        ]
    }
