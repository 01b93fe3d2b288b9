"""Four eyes in a real browser: an agent's refund over their limit waits, reserved; a support
lead, signed in as themselves with their own code, approves it from the queue (it is then
sent) or rejects it with a note from the refund's page (canceled, amount released).
Screenshots land in test-artifacts/screenshots/."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group
from django.urls import reverse

from ledger_app.models import Charge, Refund, RefundLimit
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.admin_pages import (
    AGENT,
    REFUND_BUTTON,
    at,
    at_charge_page,
    fill_refund_form,
    log_in,
    new_charge,
    refund_url,
    wait_until,
)
from tests.factories import LEADS_MIGRATION, migration_group
from tests.second_factor import device_of

# The live server answers from its own thread, so test data must really be committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inline_dispatch")]

LEAD = ("lead", "lead-pass-123")
QUEUE = reverse("admin:ledger_app_refundapproval_changelist")


def support_leads_group() -> Group:
    """The "Support leads" group the data migration made."""
    return migration_group(LEADS_MIGRATION)


@pytest.fixture
def lead(django_user_model):
    user = django_user_model.objects.create_user(LEAD[0], password=LEAD[1], is_staff=True)
    user.groups.add(support_leads_group())
    device_of(user)
    return user


@pytest.fixture
def agent_limit(support_agent) -> RefundLimit:
    return RefundLimit.objects.create(user=support_agent, currency="usd", per_refund=50_000)


def status_of(refund_id: str) -> str:
    return Refund.objects.values_list("status", flat=True).get(pk=refund_id)


def test_an_agent_over_their_limit_waits_and_a_lead_approves_it_from_the_queue(
    page, support_agent, agent_limit, lead, screenshot
):
    charge = new_charge(amount=100_000, description="Walnut desk")
    log_in(page, *AGENT)

    page.goto(refund_url(charge))
    assert "Your limits in USD: $500.00 per refund" in page.inner_text(".refund-limits")
    fill_refund_form(page, "600.00")
    screenshot(page, "refund-form-with-limits")
    page.click(REFUND_BUTTON)

    page.wait_for_url(at_charge_page(charge))
    warning = page.inner_text(".messagelist .warning")
    assert "is over your limit and is awaiting approval" in warning
    assert "the amount is reserved on the charge" in warning
    refund = Refund.objects.get()
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 60_000

    page.context.clear_cookies()  # the agent is gone; the lead signs in, with their code
    log_in(page, *LEAD)
    page.goto(reverse("admin:index"))
    screenshot(page, "index-with-queues")
    page.click(".refund-queues a:text('Refunds awaiting approval')")
    page.wait_for_url(at(QUEUE))
    assert "user:agent" in page.inner_text("#result_list")
    screenshot(page, "refunds-awaiting-approval")
    page.check(f"input.action-select[value='{refund.pk}']")
    page.select_option("select[name=action]", "approve_refunds")
    page.click("button[name=index]")

    page.wait_for_selector("body.decide-refunds")
    assert refund.pk in page.inner_text("table.awaiting-refunds")
    assert page.locator("ul.decision-totals li").all_inner_texts() == ["USD: $600.00"]
    page.fill("#id_note", "Long-standing customer")
    screenshot(page, "approve-confirmation")
    page.click("input[type=submit][value='Yes, approve it']")

    page.wait_for_url(at(QUEUE))
    assert f"Approved and refunded: 1 refund — {refund.pk} $600.00" in page.inner_text(
        ".messagelist"
    )
    wait_until(lambda: status_of(refund.pk) == Refund.Status.SUCCEEDED)
    refund.refresh_from_db()
    assert (refund.decided_by, refund.decision_note) == ("user:lead", "Long-standing customer")


def test_a_lead_rejects_from_the_refunds_page_with_a_note_and_the_amount_is_released(
    page, support_agent, agent_limit, lead, screenshot
):
    charge = new_charge(amount=100_000)
    refund = create_refund(
        RefundRequest(charge_id=charge.pk, amount=70_000, actor=support_agent)
    ).item
    assert refund.status == Refund.Status.AWAITING_APPROVAL
    log_in(page, *LEAD)

    page.goto(reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)]))
    screenshot(page, "refund-awaiting-approval")
    page.click("button.decide-link:text('Reject…')")
    page.wait_for_selector("body.decide-refunds")
    page.click("input[type=submit][value='Yes, reject it']")  # without a note
    page.wait_for_selector(".errorlist")
    assert "note_required" in page.inner_text(".errorlist")
    assert status_of(refund.pk) == Refund.Status.AWAITING_APPROVAL
    page.fill("#id_note", "Outside the refund policy")
    page.click("input[type=submit][value='Yes, reject it']")

    page.wait_for_url(at(QUEUE))
    assert f"Rejected: canceled, amount released: 1 refund — {refund.pk}" in page.inner_text(
        ".messagelist"
    )
    refund.refresh_from_db()
    assert (refund.status, refund.decision_note) == (
        Refund.Status.CANCELED,
        "Outside the refund policy",
    )
    assert Charge.objects.get(pk=charge.pk).amount_refunded == 0
