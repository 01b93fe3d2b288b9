"""Every hostile input of tests/hostile_inputs.json that the admin refund form can carry:
the form comes back (200) with the catalogue's code on it, or the request is a 4xx, never
a 5xx or a redirect to success, and nothing is written; or, for hostile-looking text that
is a legitimate refund, one refund whose text every admin page shows escaped."""

from __future__ import annotations

import re
from urllib.parse import quote as url_quote

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from ledger_app.admin.form_keys import new_form_key
from ledger_app.charges.selectors import charge_state
from tests import hostile

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("inline_dispatch")]

FORM = "application/x-www-form-urlencoded"
ECHOED_ON_THE_FORM = {"amount", "reason", "note", "idempotency_key"}


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Runs before agent_client makes its user: a real hasher costs most of a second a
    test, and the catalogue has dozens."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def refund_url(charge_id: str) -> str:
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge_id)])


def drawn_form(client, charge_id: str) -> dict[str, str]:
    """The hidden fields of a refund form as drawn for a person: its key and charge state."""
    page = client.get(refund_url(charge_id), follow=True)
    assert page.status_code == 200
    if b'id="refund-form"' not in page.content:  # nothing to refund: a form made by hand
        return {"idempotency_key": new_form_key(), "charge_state": str(charge_state(charge_id))}
    found = {
        name: re.search(rb'name="' + name.encode() + rb'" value="([^"]*)"', page.content)
        for name in ("idempotency_key", "charge_state")
    }
    assert all(found.values()), page.content
    return {name: match.group(1).decode() for name, match in found.items() if match}


def encode(pairs: list[tuple[str, str]]) -> bytes:
    return "&".join(f"{url_quote(k)}={url_quote(v)}" for k, v in pairs).encode("ascii")


def hostile_submission(client, case, charge) -> tuple[str, list[tuple[str, str]]]:
    """Where the case posts, and what: the refund form as drawn, with the case's value in
    its field (or in the URL), padded to the case's number of fields if it has one."""
    url = refund_url(case.value if case.field == "charge" else charge.pk)
    drawn = (
        {"idempotency_key": "", "charge_state": "0"}
        if case.field == "charge"
        else drawn_form(client, charge.pk)
    )
    fields = {
        "amount": case.amount,
        "reason": "requested_by_customer",
        "note": "hostile input check",
        **drawn,
    }
    if case.field in fields:
        fields[case.field] = case.value
    pairs = list(fields.items())
    if "fields" in case.expect:  # too many fields
        pairs += [(f"x{i}", "v") for i in range(case.expect["fields"] - len(pairs))]
    return url, pairs


@pytest.mark.parametrize("case", hostile.cases("admin"))
def test_hostile_input_on_the_admin_refund_form(agent_client, settings, case):
    settings.SIMULATED_GATEWAY_LATENCY_MS = 0
    agent_client.raise_request_exception = False  # a 500 must show up as a response here
    charge = hostile.target_charge(case)
    url, pairs = hostile_submission(agent_client, case, charge)
    before = hostile.snapshot(charge)

    response = agent_client.post(url, encode(pairs), content_type=FORM)
    hostile.tried()

    assert response.status_code < 500, response.content[:300]
    expected = case.expect
    if case.accepted:
        assert response.status_code == 302, response.content[-2000:]
        assert response.url == reverse("admin:ledger_app_charge_change", args=[quote(charge.pk)])
        refund = hostile.assert_one_refund_written(charge, before, 100)
        hostile.assert_admin_pages_escape(agent_client, case, refund)
        return
    if "status" in expected:
        assert response.status_code == expected["status"]
        if case.field == "charge":
            assert agent_client.get(url).status_code == expected["status"]
        hostile.assert_escaped(response.content, case.echo, shown=False)
    else:
        text = response.content.decode()
        assert response.status_code == 200, text[-2000:]
        assert 'class="errornote"' in text
        assert f"({expected['code']})" in text, re.findall(r'class="errorlist[^"]*">.*?</ul>', text)
        hostile.assert_escaped(response.content, case.echo, shown=case.field in ECHOED_ON_THE_FORM)
    hostile.assert_nothing_written(charge, before)
