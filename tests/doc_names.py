"""What the README and docs/ name in code, found and checked against the checkout: files and
folders, functions and classes (by file or by dotted module path), management commands, make
targets and settings or environment variables. For tests/test_docs_name_what_exists.py.

A name is looked for in `code spans` and, for paths, commands and make targets, in fenced
blocks too. Links are tests/test_docs_links.py's."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PACKAGES = ("ledger_app", "backoffice", "serving", "simulated_provider", "tests", "scripts")

# Real, but not in the checkout: each with why it is named.
OUTSIDE = {
    # paths
    ".venv/": "made by `make run` / `make test` (the virtualenv and what it installs)",
    ".prometheus/": "made by `make run` (PROMETHEUS_MULTIPROC_DIR)",
    "test-artifacts/": "written by the browser tests (screenshots)",
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
APPLICATION = PACKAGES[:4]
UPPER = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
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


# --- the checkout ------------------------------------------------------------------------


@functools.cache
def checkout_files() -> frozenset[str]:
    """Every file in the checkout, committed or new, that git does not ignore."""
    out = subprocess.run(
        [
            shutil.which("git") or "git",
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return frozenset(p for p in out.split("\0") if p and (ROOT / p).is_file())


@functools.cache
def checkout_paths() -> frozenset[str]:
    """Every file, and every folder with a file in it (with a trailing slash)."""
    paths = set(checkout_files())
    for file in checkout_files():
        parts = file.split("/")[:-1]
        paths.update("/".join(parts[: i + 1]) + "/" for i in range(len(parts)))
    return frozenset(paths)


@functools.cache
def top_level() -> frozenset[str]:
    return frozenset(p.split("/")[0] for p in checkout_paths())


def exists(path: str) -> bool:
    """A path from the checkout's root, or the tail of one (`dispatch/send.py`), or a bare
    file name that some file has; a folder with or without its slash; globs allowed."""
    known = checkout_paths()
    path = path.rstrip("/")
    if "*" in path:
        pattern = re.compile(re.escape(path).replace(r"\*", "[^/]*") + "/?$")
        return any(pattern.match(p) for p in known)
    anchored = path.split("/")[0] in top_level() or path.startswith(".")
    for candidate in (path, path + "/"):
        if candidate in known:
            return True
        if not anchored and any(p.endswith("/" + candidate) for p in known):
            return True
    return False


@functools.cache
def parsed(path: str) -> ast.Module | None:
    try:
        return ast.parse((ROOT / path).read_text(), filename=path)
    except (OSError, SyntaxError):
        return None


def defined_in(tree: ast.AST) -> dict[str, ast.AST]:
    """The names a module or class body defines: functions, classes, assignments, imports."""
    names: dict[str, ast.AST] = {}
    body = getattr(tree, "body", [])
    for node in body:
        if isinstance(node, ast.If | ast.Try):
            names.update(defined_in(ast.Module(body=node.body, type_ignores=[])))
        else:
            names.update(dict.fromkeys(bound_by(node), node))
    return names


def bound_by(node: ast.AST) -> list[str]:
    """The names one statement of a body binds there."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [
            name.id
            for target in node.targets
            for name in ast.walk(target)
            if isinstance(name, ast.Name)
        ]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    return []


def module_file(dotted: str) -> str | None:
    """The file of a dotted module path of the checkout, or None."""
    path = dotted.replace(".", "/")
    for candidate in (path + ".py", path + "/__init__.py"):
        if candidate in checkout_files():
            return candidate
    return None


@functools.cache
def project_classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Every class the application defines, by name: (its file, its definition)."""
    classes: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for path in sorted(checkout_files()):
        if path.endswith(".py") and path.split("/")[0] in APPLICATION:
            tree = parsed(path)
            for node in ast.walk(tree) if tree else []:
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append((path, node))
    return classes


def class_has(name: str, attribute: str, seen: frozenset[str] = frozenset()) -> bool | None:
    """Whether a class of the application defines (or inherits from one of the application's
    classes) an attribute; None when it is not the application's class or a base is not."""
    if name not in project_classes() or name in seen:
        return None
    outside_base = False
    for _path, node in project_classes()[name]:
        if attribute in defined_in(node):
            return True
        for base in node.bases:
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            found = class_has(base_name, attribute, seen | {name})
            if found:
                return True
            outside_base |= found is None
    return None if outside_base else False


def runtime_attribute(path: str, names: list[str]) -> bool:
    """For a class with a base outside the application (a Django model's `objects`)."""
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    try:
        value = importlib.import_module(module)
        for name in names:
            value = getattr(value, name)
    except (ImportError, AttributeError):
        return False
    return True


def names_in_file(path: str, names: list[str]) -> str | None:
    """None when `names` (a definition, then attributes of it) is defined in the file;
    else why not."""
    tree = parsed(path)
    if tree is None:
        return f"cannot be read as Python ({path})"
    scope: ast.AST = tree
    for i, name in enumerate(names):
        definitions = defined_in(scope)
        if name not in definitions:
            if i and isinstance(scope, ast.ClassDef):
                inherited = class_has(scope.name, name)
                if inherited or (inherited is None and runtime_attribute(path, names)):
                    return None
            where = path if i == 0 else f"{path}:{'.'.join(names[:i])}"
            return f"is not defined in {where}"
        scope = definitions[name]
    return None


# --- what the pages name ------------------------------------------------------------------


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


@functools.cache
def code_strings() -> frozenset[str]:
    """Every string constant of the application's code (not the tests')."""
    strings: set[str] = set()
    for path in checkout_files():
        if path.endswith(".py") and path.split("/")[0] in APPLICATION:
            tree = parsed(path)
            for node in ast.walk(tree) if tree else []:
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    strings.add(node.value)
    return frozenset(strings)


@functools.cache
def permissions() -> frozenset[str]:
    """`app_label.codename` of every permission the installed models declare."""
    from django.apps import apps
    from django.contrib.auth import get_permission_codename

    return frozenset(
        f"{model._meta.app_label}.{codename}"
        for model in apps.get_models()
        for codename in [
            *(
                get_permission_codename(action, model._meta)
                for action in model._meta.default_permissions
            ),
            *(custom for custom, _name in model._meta.permissions),
        ]
    )


def check_class_attribute(token: str) -> str | None:
    """`Charge.refund_blocker`, `MovementStatus.OPEN`: an application class's attribute."""
    cls, attribute = token.removesuffix("()").split(".")
    found = class_has(cls, attribute)
    if found is None:  # a base outside the application: ask the class itself
        found = any(runtime_attribute(p, [cls, attribute]) for p, _ in project_classes()[cls])
    return None if found else f"is not an attribute of {cls}"


@functools.cache
def commands() -> frozenset[str]:
    from django.core.management import get_commands

    return frozenset(get_commands())


@functools.cache
def code_words() -> frozenset[str]:
    """Every word of the checkout's code, tests, templates and catalogues: the loosest net,
    for a bare `snake_name` (a field, an error code, a parameter) that may be any of them."""
    words = set()
    for path in checkout_files():
        if path.startswith("docs/") or path.endswith((".md", ".png", ".csv")):
            continue
        words.update(re.findall(r"\w+", (ROOT / path).read_text(errors="replace")))
    return frozenset(words)


@functools.cache
def defined_anywhere() -> frozenset[str]:
    """Every function and class the application defines, at any depth."""
    names: set[str] = set()
    for path in checkout_files():
        if path.endswith(".py") and path.split("/")[0] in APPLICATION:
            tree = parsed(path)
            for node in ast.walk(tree) if tree else []:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
    return frozenset(names)


@functools.cache
def tables() -> frozenset[str]:
    from django.apps import apps

    return frozenset(model._meta.db_table for model in apps.get_models(include_auto_created=True))


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


@functools.cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, re.M))


READS = re.compile(r"environ|getenv|\b(?:META|meta)\b|^env|\benv[._]", re.M)


def reads_environment(path: str, call: ast.Call) -> bool:
    """A call that reads the environment (os.environ.get, getenv, an `env...` reader, or a
    request's WSGI environment, META); in backoffice/ (the settings and their readers) any
    call given an UPPER_SNAKE name."""
    called = ast.unparse(call.func)
    reader = READS.search(called)
    return path.startswith("backoffice/") or reader is not None


@functools.cache
def environment_names() -> frozenset[str]:
    """Names the checkout reads from the environment: an UPPER_SNAKE string given to a call
    that reads it, a subscript of os.environ or a test `in` it, in any Python module (a
    test's own setenv is not a read), and `$NAME`, `${NAME}`, `$(NAME)` in the Makefile and
    the scripts."""
    names: set[str] = set()
    for path in checkout_files():
        if path.endswith(".py"):
            names.update(python_reads(path))
        elif path == "Makefile" or path.startswith((".ci/", "scripts/")):
            text = (ROOT / path).read_text(errors="replace")
            names.update(re.findall(r"\$\$?[{(]?([A-Z][A-Z0-9_]+)", text))
            names.update(re.findall(r"environ(?:\.get)?[\[(]['\"]([A-Z][A-Z0-9_]+)", text))
    return frozenset(names)


def python_reads(path: str) -> set[str]:
    """The environment variables one Python module reads."""
    text = (ROOT / path).read_text(errors="replace")
    if not path.startswith("backoffice/") and not READS.search(text):
        return set()  # parsing only the modules that may read it
    tree = parsed(path)
    return {name for node in (ast.walk(tree) if tree else []) if (name := read_by(path, node))}


def read_by(path: str, node: ast.AST) -> str | None:
    """The environment variable `node` reads, if it is such a read."""
    name: ast.expr | None
    reader: ast.expr
    if isinstance(node, ast.Call):
        name, reader = (node.args[0] if node.args else None), node
    elif isinstance(node, ast.Subscript):
        name, reader = node.slice, node.value
    elif isinstance(node, ast.Compare):
        name, reader = node.left, node  # "NAME" in os.environ
    else:
        return None
    if not (
        isinstance(name, ast.Constant)
        and isinstance(name.value, str)
        and UPPER.fullmatch(name.value)
    ):
        return None
    if isinstance(reader, ast.Call):
        reads = reads_environment(path, reader)
    else:
        reads = bool(READS.search(ast.unparse(reader)))
    return name.value if reads else None


@functools.cache
def settings_names() -> frozenset[str]:
    """The settings backoffice/settings.py sets, and the constants the application defines
    at module or class level (OPEN_STATUSES, ...)."""
    names: set[str] = set()
    for path in checkout_files():
        if path.endswith(".py") and path.split("/")[0] in PACKAGES:
            tree = parsed(path)
            for node in ast.walk(tree) if tree else []:
                if isinstance(node, ast.Module | ast.ClassDef):
                    names.update(n for n in defined_in(node) if UPPER.fullmatch(n))
    from django.conf import settings

    names.update(n for n in dir(settings) if UPPER.fullmatch(n))
    return frozenset(names)


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
