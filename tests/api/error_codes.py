"""Every error code the API can send, found by reading the code rather than a list kept
by hand, so a new code cannot slip past the check that it is Stripe's or documented.

Where the codes come from:
- each domain error (a `LedgerError` subclass, its `code`), as the API renders it
  (`api.errors.API_CODES`);
- the API layer's own refusals in `ledger_app/api/`: a string literal passed as
  `code=`, or as the first argument of a function named `refuse`;
- the tables of DRF's and Django's refusals in `api/errors.py`.

The inbound provider webhook (`api/provider_webhooks.py`) answers the provider, not an
API client, and is left out.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ledger_app import errors
from ledger_app.api import errors as api_errors

API_DIR = Path(api_errors.__file__).parent
NOT_THE_CLIENT_API = {"provider_webhooks.py"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
STRIPE_CODES: frozenset[str] = frozenset(
    json.loads(
        (Path(__file__).parent / "stripe_reference" / "stripe_error_codes.json").read_text()
    )["codes"]
)


def _domain_errors() -> set[type[errors.LedgerError]]:
    found: set[type[errors.LedgerError]] = set()
    todo = [errors.LedgerError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def domain_codes() -> set[str]:
    """The codes domain errors carry, before the API renders them."""
    return {cls.code for cls in _domain_errors()}


def _literal_codes(tree: ast.AST) -> set[str]:
    codes = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                codes.add(keyword.value.value)
        called = node.func.attr if isinstance(node.func, ast.Attribute) else None
        called = node.func.id if isinstance(node.func, ast.Name) else called
        if called == "refuse" and node.args and isinstance(node.args[0], ast.Constant):
            codes.add(node.args[0].value)
    return {code for code in codes if isinstance(code, str)}


def api_layer_codes() -> set[str]:
    """The codes the API layer itself sends."""
    codes: set[str] = set()
    for path in sorted(API_DIR.glob("*.py")):
        if path.name not in NOT_THE_CLIENT_API:
            codes |= _literal_codes(ast.parse(path.read_text()))
    codes |= {code for _cls, _status, _type, code, _message in api_errors.DRF_ERRORS}
    codes |= {code for _cls, _status, code, _message in api_errors.DJANGO_ERRORS}
    return codes


def sent_codes() -> set[str]:
    """Every code an API client can receive."""
    rendered = {api_errors.API_CODES.get(code, code) for code in domain_codes()}
    return rendered | api_layer_codes()


def documented_own_codes() -> dict[str, str]:
    """docs/api.md's table of our own codes: code to the row's text."""
    text = DOCS.read_text()
    section = text.split("### Error codes of our own", 1)[1].split("\n#", 1)[0]
    return {
        match[1]: match[2].strip()
        for match in re.finditer(r"^\| `([a-z_]+)` \|(.*)\|$", section, re.MULTILINE)
    }
