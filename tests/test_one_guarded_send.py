"""Only the guarded send talks to the provider, read from the code itself.

The guards (lease, attempt on record before the call, lookup before any possible resend)
live in ledger_app/provider/dispatch/send.py:_guarded_send. These tests read every module of
the application and fail when anything else could reach the provider: a module that
imports the gateways, a call of a gateway's refund/charge/lookup methods anywhere else,
a caller of the lower-level helpers other than the guarded send, or an interface that
settles a refund or charge without asking the provider.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.source_tree import application_modules, imported_modules

SENDER = Path("ledger_app/provider/dispatch/send.py")
GATEWAYS = Path("ledger_app/provider/gateways")
PROVIDER_METHODS = {"refund", "charge", "lookup_refund", "lookup_charge"}
# The helpers that make the provider calls, and who alone may use each.
HELPERS = {
    "_refund_call": "_REFUND",
    "_refund_lookup": "_REFUND",
    "_charge_call": "_CHARGE",
    "_charge_lookup": "_CHARGE",
}
KINDS = {"_REFUND": "send_refund", "_CHARGE": "send_charge"}
# The one function besides the guarded send that may ask the provider (never send): the
# re-check of refunds that already succeeded, which can only move one to failed.
ASKS_ONLY = {"_REFUND": "recheck_refund"}


MODULES = application_modules()


def enclosing_functions(tree: ast.Module) -> dict[ast.AST, str]:
    """Each node mapped to the name of the top-level function or assignment it sits in."""
    owner = {}
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = top.name
        elif isinstance(top, ast.Assign | ast.AnnAssign):
            targets = top.targets if isinstance(top, ast.Assign) else [top.target]
            name = ",".join(t.id for t in targets if isinstance(t, ast.Name))
        else:
            name = "<module>"
        for node in ast.walk(top):
            owner[node] = name
    return owner


def test_the_scan_sees_the_application():
    assert SENDER in MODULES and Path("ledger_app/admin/refunds.py") in MODULES
    assert len(MODULES) > 40


def test_only_the_sender_imports_the_gateways():
    offenders = [
        str(path)
        for path, tree in MODULES.items()
        if path != SENDER
        and GATEWAYS not in path.parents
        and any(name.startswith("ledger_app.provider.gateways") for name in imported_modules(tree))
    ]

    assert offenders == []


def test_no_module_but_the_sender_calls_a_provider_method():
    offenders = [
        f"{path}:{node.lineno}"
        for path, tree in MODULES.items()
        if path != SENDER and GATEWAYS not in path.parents
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in PROVIDER_METHODS
    ]

    assert offenders == []


def test_inside_the_sender_provider_calls_sit_only_in_helpers_only_the_guarded_send_uses():
    tree = MODULES[SENDER]
    owner = enclosing_functions(tree)
    calls = {
        owner[node]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in PROVIDER_METHODS
    }
    uses: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.setdefault(node.id, set()).add(owner[node])

    def kind_calls(method: str) -> set[str]:
        return {
            owner[node]
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == method
        }

    assert calls == set(HELPERS)
    for helper, kind in HELPERS.items():
        assert uses[helper] == {kind}, helper
    for kind, sender in KINDS.items():
        assert uses[kind] == {sender} | ({ASKS_ONLY[kind]} if kind in ASKS_ONLY else set()), kind
    assert kind_calls("call") == {"_guarded_send"}
    assert kind_calls("lookup") == {"_guarded_send", *ASKS_ONLY.values()}
    assert uses["_guarded_send"] == set(KINDS.values())


def test_nothing_outside_the_sender_uses_its_private_parts():
    offenders = [
        f"{path}: {name}"
        for path, tree in MODULES.items()
        if path != SENDER
        for name in imported_modules(tree)
        if name.startswith("ledger_app.provider.dispatch")
        and name.rsplit(".", 1)[-1].startswith("_")
    ]

    assert offenders == []


INTERFACE_PACKAGES = {("ledger_app", "admin"), ("ledger_app", "api"), ("ledger_app", "management")}


@pytest.mark.parametrize("name", ["settle_refund", "settle_charge"])
def test_interfaces_never_settle_without_asking_the_provider(name):
    """Admin, API and commands reach the provider's word only through the guarded send."""
    offenders = [
        str(path)
        for path, tree in MODULES.items()
        if path.parts[:2] in INTERFACE_PACKAGES
        and any(
            imported.startswith("ledger_app.provider.dispatch") and imported.endswith(f".{name}")
            for imported in imported_modules(tree)
        )
    ]

    assert offenders == []


def test_the_old_unguarded_entry_points_are_gone():
    from ledger_app.provider import dispatch

    for name in ("dispatch_refund", "dispatch_charge", "claim_refunds", "_send"):
        assert not hasattr(dispatch, name), name
