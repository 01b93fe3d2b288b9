"""In a real browser: an agent working a second ticket about a charge a colleague refunded
$15.00 an hour ago is warned before refunding $15.00 again, and nothing moves until they
tick "Refund again anyway"."""

import pytest

from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.admin_pages import (
    REFUND_BUTTON,
    at,
    at_charge_page,
    fill_refund_form,
    new_charge,
    refund_url,
    settled,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_repeat_of_a_colleagues_refund_is_warned_then_refunded_only_when_ticked(
    agent_page, screenshot
):
    page = agent_page
    charge = new_charge(amount=5_000)
    earlier = create_refund(
        RefundRequest(charge_id=charge.pk, amount=1_500, actor="colleague")
    ).item

    page.goto(refund_url(charge))
    assert page.locator("#repeat-warning").count() == 0
    fill_refund_form(page, "15.00", note="Second ticket about the same order")
    page.click(REFUND_BUTTON)

    # The form comes back with the warning; nothing was refunded.
    page.wait_for_url(at(refund_url(charge)))
    warning = page.locator("#repeat-warning")
    assert warning.is_visible()
    text = warning.inner_text()
    assert earlier.pk in text and "colleague" in text and "$15.00" in text
    assert page.get_attribute("#id_refund_again", "aria-describedby") == "repeat-warning"
    assert not page.is_checked("#id_refund_again")
    # What was typed is still there, under the same key.
    assert page.input_value("#id_amount") == "15.00"
    screenshot(page, "refund-form-repeat-warning")
    assert Refund.objects.count() == 1
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 1_500

    # Submitting again without the tick is refused again.
    page.click(REFUND_BUTTON)
    page.wait_for_url(at(refund_url(charge)))
    assert page.locator("#repeat-warning").is_visible()
    assert Refund.objects.count() == 1

    # Ticked, it refunds once more.
    page.check("#id_refund_again")
    page.click(REFUND_BUTTON)
    page.wait_for_url(at_charge_page(charge))
    assert "of $15.00: succeeded" in page.inner_text(".messagelist .success")
    wait_until(lambda: settled(charge))
    assert Refund.objects.filter(charge=charge).count() == 2
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 3_000
