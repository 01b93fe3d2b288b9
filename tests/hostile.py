"""The catalogue of hostile inputs (tests/hostile_inputs.json), shared by the API, the admin
refund form and the refund command, and what every surface's test checks with it.

Each entry attacks one `field` (amount, charge, reason, note, idempotency_key, metadata,
params, body) with one `value`, and says per surface (`api`, `admin`, `command`) what must
happen:

- `{"code": C}`: refused with the stable code C (API: also `param` when given, `status`
  when not 400); `{"status": S}`: refused with that HTTP status, no code to show (the
  admin's 404 for an unknown charge, 400 for an oversize body);
- `{"accept": true}`: hostile-looking text that is a legitimate request: one refund is
  written, and the admin pages show the text escaped;
- `{"skip": why}`: the surface cannot carry the input at all.

A surface may send its own `value` (the admin takes major units: "100.01", not "10001").
For the API, `as` says how it is sent: `form` (the default), `json`, `raw_form` or
`raw_json` (then `body` is the whole body, with {charge} standing for the charge's id).
An `idempotency_key` goes in the Idempotency-Key header, as the text a WSGI server hands
over (the header's bytes decoded as Latin-1). A `note` says why an outcome is as it is.
An entry's `amount` replaces the valid amount every surface otherwise sends. `on:
refunded` aims at a charge that has nothing left.

Long values are written `{"$repeat": s, "times": n, "prefix": p, "suffix": q}`, glued
pieces `{"$concat": [...]}`; `{"$keys": n}` is metadata with n keys and `{"$long_key": n}`
metadata with one key n characters long.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from simulated_provider.models import ProviderRequest
from tests import tally
from tests.factories import ChargeFactory
from tests.invariants import books

CATALOGUE = Path(__file__).with_name("hostile_inputs.json")
SURFACES = ("api", "admin", "command")
CHARGE_AMOUNT = 10_000  # usd: $100.00
VALID = {"api": "100", "admin": "1.00", "command": "100"}  # one dollar, as each surface takes it
SHOWN_ON_ADMIN_PAGES = {"note", "metadata"}  # fields the refund and charge pages display
SUITE = "bad_input"


def expand(value: Any) -> Any:
    """The catalogue's shorthand for long values, written out."""
    if isinstance(value, dict):
        if "$repeat" in value:
            return (
                value.get("prefix", "")
                + value["$repeat"] * value["times"]
                + value.get("suffix", "")
            )
        if "$concat" in value:
            return "".join(expand(piece) for piece in value["$concat"])
        if "$keys" in value:
            return {f"k{i}": "v" for i in range(value["$keys"])}
        if "$long_key" in value:
            return {"k" * value["$long_key"]: "v"}
        return {expand(k): expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


@dataclass(frozen=True)
class Case:
    """One entry as one surface sees it."""

    entry: dict
    surface: str

    @property
    def id(self) -> str:
        return self.entry["id"]

    @property
    def field(self) -> str:
        return self.entry["field"]

    @property
    def expect(self) -> dict:
        return self.entry[self.surface]

    @property
    def value(self) -> Any:
        return expand(self.expect.get("value", self.entry["value"]))

    @property
    def amount(self) -> str:
        return self.entry.get("amount", VALID[self.surface])

    @property
    def accepted(self) -> bool:
        return bool(self.expect.get("accept"))

    @property
    def echo(self) -> str | None:
        """Hostile markup the entry carries, which must never reach a page unescaped."""
        return self.entry.get("echo")


def load() -> list[dict]:
    with CATALOGUE.open(encoding="utf-8") as f:
        return json.load(f)["entries"]


ENTRIES = load()


def cases(surface: str) -> list:
    """pytest params for a surface: every entry that applies to it."""
    import pytest

    return [
        pytest.param(Case(entry, surface), id=entry["id"])
        for entry in ENTRIES
        if "skip" not in entry[surface]
    ]


# --- the world each case runs in ----------------------------------------------------------


def target_charge(case: Case) -> Charge:
    """A fresh $100.00 charge, or one refunded in full for entries `on: refunded`."""
    charge = ChargeFactory(amount=CHARGE_AMOUNT, currency="usd")
    if case.entry.get("on") == "refunded":
        create_refund(RefundRequest(charge_id=charge.pk))
        charge.refresh_from_db()
        assert charge.amount_refundable == 0
    return charge


def snapshot(charge: Charge) -> tuple:
    """books() plus what books() does not look at: provider requests and charges."""
    return books(charge), ProviderRequest.objects.count(), Charge.objects.count()


def assert_nothing_written(charge: Charge, before: tuple) -> None:
    assert snapshot(charge) == before, "a refused request wrote something"
    tally.add(SUITE, invariant_checks=1)


def assert_one_refund_written(charge: Charge, before: tuple, amount: int) -> Refund:
    (refunded, refunds, entries, keys), _, charges = before
    charge.refresh_from_db()
    assert charge.amount_refunded == refunded + amount
    assert Refund.objects.count() == refunds + 1
    assert Charge.objects.count() == charges
    refund = Refund.objects.get(charge=charge)
    assert refund.amount == amount
    tally.add(SUITE, invariant_checks=1)
    return refund


def tried() -> None:
    tally.add(SUITE, bad_inputs=1)


# --- the admin's view of what was written -------------------------------------------------


def staff_client() -> Client:
    """A support agent, logged in (as tests/admin/conftest.py makes one)."""
    user = get_user_model().objects.create_user("hostile-agent", is_staff=True)
    user.groups.add(Group.objects.get(name="Support agents"))
    client = Client()
    client.force_login(user)
    return client


def assert_escaped(body: bytes, text: str | None, *, shown: bool) -> None:
    """`text` never appears raw; when the page shows it at all, it appears escaped."""
    if not text or escape(text) == text:
        return
    assert text.encode() not in body, f"{text!r} reached the page unescaped"
    if shown:
        assert escape(text).encode() in body, f"{text!r} is not shown escaped"


def assert_admin_pages_escape(client: Client, case: Case, refund: Refund) -> None:
    """The refund's and the charge's admin pages render, and show hostile text escaped."""
    pages = [
        client.get(reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])),
        client.get(reverse("admin:ledger_app_charge_change", args=[quote(refund.charge_id)])),
    ]
    for page in pages:
        assert page.status_code == 200
        assert_escaped(page.content, case.echo, shown=False)
    if case.echo and case.field in SHOWN_ON_ADMIN_PAGES:
        assert any(escape(case.echo).encode() in page.content for page in pages)
