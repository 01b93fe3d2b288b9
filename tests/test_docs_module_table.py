"""docs/architecture.md's module table is made from the modules' docstrings
(tests/module_table.py): the committed table is what `scripts/module-table` renders now, so a
module added, moved or re-described shows there without anyone editing the page."""

import subprocess
import sys

import pytest

from tests.module_table import BEGIN, COMMAND, END, PAGE, ROOT, committed, render, summary

pytestmark = pytest.mark.any_database


def test_the_committed_module_table_is_what_the_docstrings_say():
    page = PAGE.read_text()
    assert page.count(BEGIN) == page.count(END) == 1, f"{PAGE.name} needs both markers, once"
    assert committed(page) == render(), (
        f"docs/architecture.md's module table is stale: run {COMMAND} and commit the page"
    )


def test_the_table_names_every_room_and_interface_module():
    table = render()
    for module in (
        "`refunds/services.py`",
        "`provider/dispatch/send.py`",
        "`compiled.py`",
        "`admin/refund_form.py`",
        "`serving/health.py`",
        "`backoffice/startup.py`",
    ):
        assert f"| {module} |" in table


def test_a_summary_is_the_first_sentence_cut_only_where_nothing_is_open(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Refunds: the one write path, e.g. for the admin. More after it."""\n')
    assert summary(module) == "Refunds: the one write path, e.g. for the admin."

    long = "Rows: " + ", ".join(f"`a, {n}` (x, y)" for n in range(30)) + "."
    module.write_text(f'"""{long}\nA second line of the same paragraph.\n\nAnother."""\n')
    cut = summary(module)
    assert cut.endswith(" …") and len(cut) <= 162
    kept = cut.removesuffix(" …")
    assert kept.count("`") % 2 == 0 and kept.count("(") == kept.count(")")

    module.write_text("x = 1\n")
    assert summary(module) == ""


def test_the_command_checks_the_table():
    result = subprocess.run(
        [sys.executable, str(ROOT / COMMAND), "--check"], capture_output=True, text=True
    )
    assert result.returncode == (0 if committed(PAGE.read_text()) == render() else 1)
    assert result.stdout.strip() in ("the module table is up to date", f"stale: run {COMMAND}")
