"""What the checkout holds, for the docs' names check (tests/doc_names.py): its files,
what each Python file defines, the commands, make targets, tables and permissions, and
the environment variables and settings the code reads."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


PACKAGES = ("ledger_app", "backoffice", "serving", "simulated_provider", "tests", "scripts")


APPLICATION = PACKAGES[:4]


UPPER = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


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
