"""The tests keep to their own layout: a test module imports helpers from helper modules or
a conftest, never from another test module (whose tests would then run twice, and whose
edits would break tests elsewhere)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imports_of_test_modules(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"):
                found.append(name)
                break
    return found


def test_no_test_module_imports_another():
    offenders = {
        str(path.relative_to(TESTS)): imports_of_test_modules(ast.parse(path.read_text()))
        for path in TESTS.rglob("*.py")
    }
    assert len(offenders) > 100
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_check_sees_both_forms_of_import():
    sample = ast.parse(
        "from tests.commands.test_bulk_refund import bulk\n"
        "import tests.api.test_schema\n"
        "from tests.commands import bulk_runs\n"
        "def f():\n    from tests.admin.test_refund_form import submit\n"
    )
    assert imports_of_test_modules(sample) == [
        "tests.commands.test_bulk_refund",
        "tests.api.test_schema",
        "tests.admin.test_refund_form",
    ]
