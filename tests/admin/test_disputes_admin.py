"""The admin shows a charge's dispute, filters charges by it, and refuses to refund a
charge whose dispute is open (the refund form, and the list's bulk action)."""

import pytest
from django.urls import reverse

from ledger_app.models import Charge, Refund
from tests.admin.refund_form_pages import drawn_form, submit
from tests.factories import ChargeFactory

pytestmark = pytest.mark.django_db
CHARGES = "admin:ledger_app_charge_changelist"


def disputed(charge: Charge, status: str = "needs_response") -> Charge:
    Charge.objects.filter(pk=charge.pk).update(dispute_id="dp_admin_1", dispute_status=status)
    charge.refresh_from_db()
    return charge


def test_the_form_refuses_a_charge_disputed_after_it_was_drawn(agent_client):
    charge = ChargeFactory(amount=5_000)
    key, state = drawn_form(agent_client, charge)
    disputed(charge)

    response = submit(agent_client, charge, key=key, state=state, amount="10.00")

    assert "open dispute" in response.content.decode()
    assert not Refund.objects.exists()


def test_the_charge_page_and_the_list_filter_show_the_dispute(admin_client):
    open_one = disputed(ChargeFactory(description="open one"))
    closed = disputed(ChargeFactory(description="closed one"), "won")
    plain = ChargeFactory(description="plain one")

    def listed(value):
        page = admin_client.get(reverse(CHARGES), {"dispute": value}).content.decode()
        return {c.pk for c in (open_one, closed, plain) if c.pk in page}

    assert listed("open") == {open_one.pk}
    assert listed("closed") == {closed.pk}
    assert listed("none") == {plain.pk}
    page = admin_client.get(reverse("admin:ledger_app_charge_change", args=[open_one.pk]))
    text = page.content.decode()
    assert "dp_admin_1" in text and "needs_response" in text
    assert "disputed: needs_response" in admin_client.get(reverse(CHARGES)).content.decode()
