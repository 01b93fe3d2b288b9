"""The refund admin in a real browser: what a support agent clicks, and what that leaves
in the database. Screenshots land in test-artifacts/screenshots/."""

import re
from urllib.parse import unquote, urlsplit

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.urls import reverse

from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.admin_pages import (
    CHANGELIST,
    REFUND_BUTTON,
    VIEWER,
    at,
    at_charge_page,
    change_url,
    fill_refund_form,
    log_in,
    new_charge,
    refund_url,
    settled,
    wait_until,
)
from tests.browser.chromium import DESKTOP, PHONE

# The live server answers from its own thread, so test data must really be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def assert_a_new_form_for_fifty_dollars(page) -> None:
    """The refund form a link lands on: its own key, for Back and reload, and no amount
    drawn in, for a charge of $50.00 with nothing refunded."""
    # The link lands on the form's own URL: its key is in the query.
    # The key the form issued, signed (admin/form_keys.py new_form_key): <32 hex>:<signature>.
    query = unquote(urlsplit(page.url).query)
    assert re.fullmatch(r"form=[0-9a-f]{32}:[A-Za-z0-9_-]+", query)
    key = page.get_attribute("input[name=idempotency_key]", "value")
    assert key == "admin:" + query.removeprefix("form=")
    assert "$50.00" in page.inner_text(".refund-summary")
    # Nothing stands for "the rest": the amount is blank, and the box naming the exact
    # amount left is drawn unticked.
    assert page.input_value("#id_amount") == ""
    assert page.get_attribute("#id_amount", "placeholder") is None
    assert page.inner_text("label[for=id_refund_all]") == "Refund everything left ($50.00):"
    assert not page.is_checked("#id_refund_all")
    assert page.get_attribute("#id_refund_all", "value") == "5000"


def test_a_support_agent_issues_a_partial_refund_from_the_charge_page(
    agent_page, support_agent, screenshot
):
    page = agent_page
    charge = new_charge(description="Blue teapot")

    page.goto(change_url(charge))
    link = page.locator("a.refund-link")
    assert link.text_content() == "Refund…"  # the admin's CSS shows it in capitals
    link.click()
    page.wait_for_url(at(refund_url(charge)))
    assert_a_new_form_for_fifty_dollars(page)
    fill_refund_form(page, "12.34")
    screenshot(page, "refund-form")
    page.click(REFUND_BUTTON)

    page.wait_for_url(at_charge_page(charge))
    success = page.locator(".messagelist .success")
    assert success.is_visible()
    assert "of $12.34: succeeded" in success.inner_text()
    assert "$12.34" in page.inner_text(".field-refund_history")
    assert "Refunded $12.34" in page.inner_text(".field-admin_history")
    screenshot(page, "charge-page-after-partial-refund")

    refund = Refund.objects.get()
    charge.refresh_from_db()
    assert (refund.charge_id, refund.amount, refund.currency) == (charge.pk, 1_234, "usd")
    assert refund.status == Refund.Status.SUCCEEDED
    assert refund.source == Refund.Source.ADMIN
    assert refund.reason == Refund.Reason.REQUESTED_BY_CUSTOMER
    assert refund.created_by == support_agent
    assert charge.amount_refunded == 1_234
    assert LogEntry.objects.filter(object_id=charge.pk, user=support_agent).count() == 1


def assert_refunded_in_full_as_a_duplicate(charge) -> None:
    """Once its refund has settled: one refund of the whole charge, succeeded."""
    wait_until(lambda: settled(charge))
    charge.refresh_from_db()
    refund = Refund.objects.get(charge=charge)
    assert refund.amount == charge.amount == charge.amount_refunded
    assert (refund.status, refund.reason) == (Refund.Status.SUCCEEDED, "duplicate")


def test_the_bulk_action_refunds_three_selected_charges_in_full_after_a_confirmation(
    agent_page, screenshot
):
    page = agent_page
    chosen = [
        new_charge(amount=2_500, currency="usd"),
        new_charge(amount=1_050, currency="usd"),
        new_charge(amount=1_234, currency="jpy"),
    ]
    untouched = new_charge(amount=9_999, currency="usd")

    page.goto(reverse(CHANGELIST))
    for charge in chosen:
        page.check(f"input.action-select[value='{charge.pk}']")
    assert page.inner_text(".action-counter").startswith("3 of 4 selected")
    page.select_option("select[name=action]", "refund_in_full")
    page.click("button[name=index]")

    page.wait_for_selector("body.refund-in-full-confirmation")
    listed = page.inner_text("#content table")
    assert all(charge.pk in listed for charge in chosen)
    assert untouched.pk not in listed
    assert page.locator("ul.refund-totals li").all_inner_texts() == [
        "JPY: ¥1,234",
        "USD: $35.50",
    ]
    page.select_option("#id_reason", "duplicate")
    page.fill("#id_note", "Charged three times by the checkout bug.")
    screenshot(page, "bulk-refund-confirmation")
    page.click("input[type=submit][value='Yes, refund them in full']")

    page.wait_for_url(at(reverse(CHANGELIST)))
    message = page.inner_text(".messagelist .success")
    assert message.startswith("Refunded:")
    assert all(charge.pk in message for charge in chosen)
    for charge in chosen:
        assert_refunded_in_full_as_a_duplicate(charge)
    assert Refund.objects.count() == 3
    untouched.refresh_from_db()
    assert untouched.amount_refunded == 0


def page_overflow(page) -> int:
    """How many CSS pixels the page is wider than the window (0: no sideways scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def fully_visible(page, selector: str) -> bool:
    element = page.locator(selector)
    box = element.bounding_box()
    width = page.evaluate("window.innerWidth")
    return element.is_visible() and box["x"] >= 0 and box["x"] + box["width"] <= width


def tables_out_of_reach(page) -> list[str]:
    """Tables partly hidden with no way to scroll to the rest: wider than what clips them
    (an `overflow: hidden` ancestor, such as the admin's .form-row, or the window),
    with no scrolling container of their own in between that fits."""
    return page.evaluate(
        """() => [...document.querySelectorAll("#content table")].flatMap((table) => {
            const right = table.getBoundingClientRect().right;
            for (let el = table.parentElement; el; el = el.parentElement) {
                const overflow = getComputedStyle(el).overflowX;
                const edge = el === document.body ? window.innerWidth
                    : el.getBoundingClientRect().right;
                if (overflow === "auto" || overflow === "scroll") {
                    return edge <= window.innerWidth + 1 ? [] : [table.innerText.slice(0, 40)];
                }
                if (overflow === "hidden" || overflow === "clip" || el === document.body) {
                    return right <= edge + 1 ? [] : [table.innerText.slice(0, 40)];
                }
            }
            return [];
        })"""
    )


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1280px", "phone-390px"])
def test_the_charge_page_and_refund_form_fit_the_window(agent_page, size, screenshot):
    page = agent_page
    charge = new_charge(description="Blue teapot")
    create_refund(
        RefundRequest(charge_id=charge.pk, amount=1_000, note="An earlier partial refund.")
    )
    page.set_viewport_size(size)
    width = size["width"]

    page.goto(change_url(charge))
    # The admin's stylesheets are served and applied: not an unstyled page.
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex"
    screenshot(page, f"charge-page-{width}px")
    assert page_overflow(page) <= 1, f"the charge page scrolls sideways at {width}px"
    assert tables_out_of_reach(page) == [], f"history tables are clipped at {width}px"
    assert fully_visible(page, "a.refund-link")

    page.click("a.refund-link")
    page.wait_for_url(at(refund_url(charge)))
    screenshot(page, f"refund-form-{width}px")
    assert page_overflow(page) <= 1, f"the refund form scrolls sideways at {width}px"
    assert tables_out_of_reach(page) == [], f"tables are clipped at {width}px"
    for selector in [
        ".refund-summary",
        "#refund-form",
        "#id_amount",
        "#id_refund_all",
        "#id_note",
        REFUND_BUTTON,
    ]:
        assert fully_visible(page, selector), f"{selector} is cut off at {width}px"


def test_a_charge_id_that_looks_admin_quoted_still_lands_on_its_own_page(agent_page):
    """The admin escapes "_" in URLs as "_5F" and unescapes what it reads, so every link
    and redirect must quote the id, or "ch_5Fab" is read back as "ch_ab"."""
    page = agent_page
    charge = new_charge(charge_id="ch_5F" + "Q" * 22)
    page.goto(change_url(charge))
    page.click("a.refund-link")
    fill_refund_form(page, "12.34")
    page.click(REFUND_BUTTON)

    page.wait_for_url(at_charge_page(charge))
    assert "of $12.34: succeeded" in page.inner_text(".messagelist .success")
    refund = Refund.objects.get()
    assert refund.charge_id == charge.pk
    page.click(f".field-refund_history a:text-is('{refund.pk}')")
    page.wait_for_url(at(reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])))
    assert refund.pk in page.inner_text("#content")


def test_staff_without_the_refund_permission_see_no_refund_link_or_action(
    page, viewer, browser_problems
):
    charge = new_charge()
    log_in(page, *VIEWER)

    page.goto(change_url(charge))
    assert page.inner_text("h1") == "View charge"
    assert page.locator("a.refund-link").count() == 0
    page.goto(reverse(CHANGELIST))
    assert page.locator(f"#result_list a[href='{change_url(charge)}']").count() == 1
    assert page.locator("option[value=refund_in_full]").count() == 0

    browser_problems.expect_status(403)
    response = page.goto(refund_url(charge))
    assert response.status == 403
    assert not Refund.objects.exists()
    charge.refresh_from_db()
    assert charge.amount_refunded == 0
