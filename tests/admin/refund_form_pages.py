"""The refund form driven as a browser would: opened under its key, read, submitted."""

import re

from django.contrib.admin.utils import quote
from django.urls import reverse


def refund_url(charge):
    return reverse("admin:ledger_app_charge_refund", args=[quote(charge.pk)])


def hidden(response, name: str) -> str:
    pattern = rb'name="' + name.encode() + rb'" value="([^"]*)"'
    found = re.search(pattern, response.content)
    assert found, f"no hidden {name} on the page"
    return found.group(1).decode()


def form_key(response) -> str:
    return hidden(response, "idempotency_key")


def open_form(client, charge):
    """The refund page as a person reaches it: the plain URL redirects to a form of its own."""
    return client.get(refund_url(charge), follow=True)


def drawn_form(client, charge) -> tuple[str, str]:
    """The key and the charge state of a refund form as drawn for a person."""
    page = open_form(client, charge)
    return form_key(page), hidden(page, "charge_state")


def submit(client, charge, key=None, state=None, **fields):
    page = None
    if key is None or state is None:
        page = open_form(client, charge)
    data = {
        "amount": "",
        "reason": "requested_by_customer",
        "note": "",
        "idempotency_key": key or form_key(page),
        "charge_state": hidden(page, "charge_state") if state is None else state,
    }
    return client.post(refund_url(charge), {**data, **fields})
