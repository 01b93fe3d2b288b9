"""docs/architecture.md's module table, made from the modules' own docstrings: each package and
module of ledger_app (its rooms, its shared modules, its interfaces), serving/, backoffice/ and
simulated_provider/, with the first sentence of its docstring. `scripts/module-table` writes
it between the two marker comments; tests/test_docs_module_table.py fails when the committed
table is not what this renders. To change a line, change the module's docstring."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- module-table: begin (scripts/module-table writes this from the docstrings) -->"
END = "<!-- module-table: end -->"
COMMAND = "scripts/module-table"
LONGEST = 160  # characters of a docstring's first sentence before it is cut at a clause

# ledger_app's packages that are not rooms: the interfaces, and the shared kernel's packages.
INTERFACES = ("admin", "api", "management", "templatetags")
SHARED_PACKAGES = ("api_versions", "metrics")
SKIPPED = ("migrations", "static", "templates", "__pycache__")


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line; cut at a clause if long."""
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))
    if not docstring:
        return ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    end = re.search(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)(?<=[.!?])\s+(?=\S)", paragraph)
    sentence = paragraph[: end.start()] if end else paragraph
    if len(sentence) > LONGEST:
        cuts = [
            m.start()
            for m in re.finditer(r"[:;,] ", sentence[:LONGEST])
            if m.start() > 20 and balanced(sentence[: m.start()])
        ]
        sentence = sentence[: cuts[-1]] + " …" if cuts else sentence
    return sentence.replace("|", "\\|")


def balanced(text: str) -> bool:
    """No code span or parenthesis left open: a place a sentence may be cut."""
    return text.count("`") % 2 == 0 and text.count("(") == text.count(")")


def packages(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_dir() and p.name not in SKIPPED and (p / "__init__.py").exists()
    )


def modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def package_rows(package: Path, base: Path) -> list[tuple[str, str]]:
    """A package (bold, its __init__'s docstring), then its modules, then its packages. A
    module without a docstring is left out (apps.py, urls.py, wsgi.py), and so is a package
    without one that has no module of its own (management/)."""
    name = package.relative_to(base).as_posix()
    own = [(f"`{m.relative_to(base).as_posix()}`", summary(m)) for m in modules(package)]
    own = [(module, text) for module, text in own if text]
    about = summary(package / "__init__.py")
    rows = [(f"**`{name}/`**", about)] if about or own else []
    rows += own
    for inner in packages(package):
        rows += package_rows(inner, base)
    return rows


def table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| module | what it is (its docstring's first sentence) |", "|---|---|"] + [
        f"| {name} | {text} |" for name, text in rows
    ]


def render() -> str:
    """The table, as the markers enclose it."""
    app = ROOT / "ledger_app"
    rooms = [p for p in packages(app) if p.name not in INTERFACES + SHARED_PACKAGES]
    shared_rows = [(f"`{m.name}`", summary(m)) for m in modules(app) if summary(m)]
    for package in packages(app):
        if package.name in SHARED_PACKAGES:
            shared_rows += package_rows(package, app)
    sections = [
        (
            "Rooms, `ledger_app/<room>/`: a domain's models, services and selectors side by side",
            [row for room in rooms for row in package_rows(room, app)],
        ),
        ("Shared modules, `ledger_app/`: what every room may use", shared_rows),
        (
            "Interfaces, `ledger_app/`: the admin, the API, the commands, the templates' tags",
            [
                row
                for package in packages(app)
                if package.name in INTERFACES
                for row in package_rows(package, app)
            ],
        ),
    ]
    for folder in ("serving", "backoffice", "simulated_provider"):
        about = summary(ROOT / folder / "__init__.py")
        rows = [row for row in package_rows(ROOT / folder, ROOT) if row[0] != f"**`{folder}/`**"]
        sections.append((f"`{folder}/`" + (f": {about}" if about else ""), rows))
    lines = [BEGIN, ""]
    for title, rows in sections:
        lines += [f"**{title}**", "", *table(rows), ""]
    return "\n".join([*lines, END])


def committed(text: str) -> str:
    """What the page holds between the markers (the markers included), or ''."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start : end + len(END)] if 0 <= start < end else ""


def write() -> bool:
    """Put the rendered table between the page's markers; True when it changed."""
    text = PAGE.read_text()
    old = committed(text)
    if not old:
        raise SystemExit(f"{PAGE.relative_to(ROOT)} has no {BEGIN!r} ... {END!r} markers")
    new = render()
    if old != new:
        PAGE.write_text(text.replace(old, new))
    return old != new


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        same = committed(PAGE.read_text()) == render()
        print("the module table is up to date" if same else f"stale: run {COMMAND}")
        return 0 if same else 1
    if argv[1:]:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    print("docs/architecture.md: module table " + ("rewritten" if write() else "unchanged"))
    return 0
