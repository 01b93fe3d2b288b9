"""What the README and docs/ name in code, found and checked against the checkout: files and
folders, functions and classes (by file or by dotted module path), management commands, make
targets and settings or environment variables. For tests/test_docs_name_what_exists.py.

A name is looked for in `code spans` and, for paths, commands and make targets, in fenced
blocks too. Links are tests/test_docs_links.py's; what the checkout holds, tests/code_index.py's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from tests.code_index import (
    APPLICATION,
    ROOT,
    UPPER,
    checkout_files,
    class_has,
    code_strings,
    code_words,
    commands,
    defined_anywhere,
    environment_names,
    exists,
    make_targets,
    module_file,
    names_in_file,
    permissions,
    project_classes,
    runtime_attribute,
    settings_names,
    tables,
    top_level,
)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# Real, but not in the checkout: each with why it is named.
OUTSIDE = {
    # paths
    ".venv/": "made by `make run` / `make test` (the virtualenv and what it installs)",
    ".prometheus/": "made by `make run` (PROMETHEUS_MULTIPROC_DIR)",
    "test-artifacts/": "written by the browser tests (screenshots)",
    "demo-mail/": "made by `make run` (the demo's SMTP sink keeps its mails there; git-ignored)",
    ".secret_key": "made by the first DEBUG start (git-ignored)",
    "conf.d/": "nginx's folder of site files, on the server",
    "changes.py": "Stripe's and this project's ledger_app/api_versions/changes.py, named short",
    # environment variables read by other programs, not by this project's code
    "PROMETHEUS_MULTIPROC_DIR": "read by prometheus_client (multiprocess mode)",
    "PGPASSWORD": "read by libpq and the PostgreSQL client tools",
    "DJANGO_SETTINGS_MODULE": "read by Django itself",
    "PYTHONUNBUFFERED": "read by Python itself",
    # names of other programs
    "max_wal_size": "a PostgreSQL setting",
    "client_body_timeout": "an nginx directive",
    "_like": "the suffix of the pattern-matching index PostgreSQL names for a Django field",
}


FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")  # a span may wrap once


EXTENSIONS: tuple[str, ...] = (
    ".py",
    ".md",
    ".yml",
    ".yaml",
    ".json",
    ".txt",
    ".in",
    ".env",
    ".conf",
    ".toml",
)


EXTENSIONS += (".html", ".csv", ".sh", ".js", ".cfg", ".ini", ".sql", ".png", ".lock")


COMMAND = re.compile(r"(?:^|[\s(])(?:django-admin|manage\.py)\s+([a-z][a-z0-9_]*)")


MAKE = re.compile(r"(?:^|[\s(;&|])make\s+([a-z][a-z0-9_-]*)")


@dataclass(frozen=True)
class Found:
    page: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: `{self.what}` {self.why}"


def spans(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, in a fence) of each code span and of each fenced block's lines."""
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, line in enumerate(block.group(1).splitlines()):
            yield first + offset, line, True
    prose = FENCE.sub(lambda block: re.sub(r"[^\n]", " ", block.group(0)), text)
    for match in SPAN.finditer(prose):
        line = text.count("\n", 0, match.start()) + 1
        content = re.sub(r"/\s*\n\s*", "/", match.group(1))
        yield line, " ".join(content.split()), False


def path_like(token: str) -> bool:
    """A token that names a path: from a top-level entry of the checkout, a file name with
    an extension, or a folder (`dispatch/`); not a URL path, a MIME type or a rate."""
    if not re.fullmatch(r"\.?[\w.*-]+(/[\w.*-]+)*/?", token):
        return False
    if token.split("/")[0] in top_level() or any(token.startswith(o) for o in OUTSIDE):
        return True
    if token.endswith("/"):
        return not token[0].isdigit()
    if "/" not in token:  # a bare name: a module (others are examples: `report.csv`)
        return token.endswith(".py") and not token.startswith(".")
    return token.lower().endswith(tuple(EXTENSIONS))


def check_path(token: str) -> str | None:
    if any(token == o or token.startswith(o) for o in OUTSIDE if o.endswith("/")) or (
        token in OUTSIDE
    ):
        return None
    migration = re.fullmatch(r"(\w+)/(\d{4})", token)
    if migration:
        app, number = migration.groups()
        if any(re.fullmatch(rf"{app}/migrations/{number}_\w+\.py", p) for p in checkout_files()):
            return None
        return f"names a migration that {app}/migrations/ does not have"
    return None if exists(token) else "names a path that does not exist"


def resolve_file(token: str) -> str | None:
    """The one checkout file a (possibly short) path names, or None."""
    token = token.rstrip("/")
    if (ROOT / token).is_dir() and token + "/__init__.py" in checkout_files():
        return token + "/__init__.py"
    if token in checkout_files():
        return token
    tails = [p for p in checkout_files() if p.endswith("/" + token)]
    return tails[0] if len(tails) == 1 else None


def check_definition(token: str) -> str | None:
    """`path.py:name`, `path.py::Test::name`, `path.py: name`, `folder:name`."""
    path, _, names = re.sub(r":\s+", ":", token).partition(":")
    names = names.lstrip(":").replace("::", ".")
    why = check_path(path)
    if why:
        return why
    file = resolve_file(path)
    if file is None:
        return f"names {path}, which is not one file"
    return names_in_file(file, names.removesuffix("()").split("."))


def check_dotted(token: str) -> str | None:
    """`ledger_app.refunds.services.create_refund`, `...drift.find_ledger_drift()`; or a
    dotted name the code spells out: a logger, a check id (`ledger_app.W250`), a
    permission (`ledger_app.refund_charge`)."""
    if token in code_strings() or token in permissions():
        return None
    parts = token.removesuffix("()").split(".")
    for i in range(len(parts), 0, -1):
        file = module_file(".".join(parts[:i]))
        if file:
            rest = parts[i:]
            why = names_in_file(file, rest) if rest else None
            return why and f"{why}, nor is it a logger, check id or permission"
    return "is not a module of the checkout"


def check_class_attribute(token: str) -> str | None:
    """`Charge.refund_blocker`, `MovementStatus.OPEN`: an application class's attribute."""
    cls, attribute = token.removesuffix("()").split(".")
    found = class_has(cls, attribute)
    if found is None:  # a base outside the application: ask the class itself
        found = any(runtime_attribute(p, [cls, attribute]) for p, _ in project_classes()[cls])
    return None if found else f"is not an attribute of {cls}"


def check_word(token: str) -> str | None:
    """A bare `name()` is a function or class of the application; a bare `snake_name` is a
    word the code has somewhere, a table (or a table's index), or named in OUTSIDE."""
    name = token.removesuffix("()")
    if token.endswith("()"):
        return None if name in defined_anywhere() else "is not a function the code defines"
    if name in OUTSIDE or name in tables() or name.startswith(tuple(t + "_" for t in tables())):
        return None
    if all(part in code_words() for part in name.split("__") if part):
        return None
    return "is not a word the code, tests or templates use"


def check_upper(name: str, *, configuration: bool) -> str | None:
    if name in OUTSIDE or name in environment_names():
        return None
    if configuration:
        return "is in the configuration table but no code reads it from the environment"
    if name in settings_names():
        return None
    return "is neither read from the environment nor a setting or constant of the code"


def check_token(token: str, *, bare_words: bool) -> tuple[str, str | None] | None:
    """(what, why it is missing or None) for a token that names something, else None."""
    if re.fullmatch(r"[\w./*-]+(::?\s?[\w.]+(\(\))?)+", token) and path_like(token.split(":")[0]):
        return token, check_definition(token)
    if re.fullmatch(rf"(?:{'|'.join(APPLICATION)})(\.\w+)+(\(\))?", token):
        return token, check_dotted(token)
    if re.fullmatch(r"[A-Z][a-z]\w*\.[A-Za-z_]\w*(\(\))?", token) and (
        token.split(".")[0] in project_classes()
    ):
        return token, check_class_attribute(token)
    if path_like(token):
        return token, check_path(token)
    if bare_words and re.fullmatch(r"_?[a-z][a-z0-9]*(_[a-z0-9]+)+_?(\(\))?", token):
        return token, check_word(token)
    return None


def names_on(page_name: str, text: str) -> list[Found]:
    """Everything a page names that the checkout does not have."""
    found = [
        Found(page_name, line, what, why)
        for line, content, fenced in spans(text)
        for what, why in missing_on_line(content, fenced=fenced)
        if why
    ]
    if page_name == "docs/operating/configuration.md":
        found += [
            Found(page_name, line, what, why)
            for line, what, why in missing_in_configuration_table(text)
            if why
        ]
    return sorted(set(found), key=lambda f: (f.line, f.what))


def missing_on_line(content: str, *, fenced: bool) -> list[tuple[str, str | None]]:
    """(name, why it is missing, or None) for each name on one line of a page."""
    named: list[tuple[str, str | None]] = [
        (f"manage.py {command}", "is not a management command")
        for command in COMMAND.findall(content)
        if command not in commands()
    ]
    named += [
        (f"make {target}", "is not a target of the Makefile")
        for target in MAKE.findall(content)
        if target not in make_targets()
    ]
    whole = [] if fenced else [content]
    words = [] if not fenced and " " not in content else content.split()
    anchored = [
        token.strip(",;()\"'")
        for token in words
        if token.strip(",;()\"'").split("/")[0] in top_level() - {"README.md"}
    ]
    named += [
        found for token in whole + anchored if (found := check_token(token, bare_words=not fenced))
    ]
    if not fenced:
        named += environment_on_line(content)
    return named


def environment_on_line(content: str) -> list[tuple[str, str | None]]:
    """Environment variables set on a line (`NAME=...`) and settings it names."""
    set_here = [
        *re.findall(rf"^({UPPER.pattern})(?==|$)", content),
        *re.findall(rf"(?:^|\s)({UPPER.pattern})=", content),
    ]
    named = [(name, check_upper(name, configuration=False)) for name in set_here]
    named += [
        (f"settings.{name}", "is not a setting")
        for name in re.findall(r"\bsettings\.([A-Z][A-Z0-9_]*)", content)
        if name not in settings_names()
    ]
    return named


def missing_in_configuration_table(text: str) -> list[tuple[int, str, str | None]]:
    """configuration.md's table: each name in a row's first cell must be read from the
    environment."""
    named = []
    for number, row in enumerate(text.splitlines(), 1):
        if row.startswith("| `"):
            first_cell = row.split("|")[1]
            named += [
                (number, name, check_upper(name, configuration=True))
                for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", first_cell)
            ]
    return named


def everything_named_that_is_missing() -> list[Found]:
    found = []
    for page in PAGES:
        found += names_on(str(page.relative_to(ROOT)), page.read_text())
    return found
