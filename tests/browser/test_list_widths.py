"""Every admin list at the width of a support laptop (1280 px) and of a phone (390 px),
filled with the widest rows real data can make (tests/browser/conftest.py:widest_rows).

At 1280 px a list shows its columns without scrolling sideways: neither the page nor the
table scrolls, and every column header is inside the window. Lists make room by hiding
Django's nav sidebar below 1600 px (admin.css); at 1600 px the sidebar is back and the
lists still fit.

At 390 px a list is usable when:
- the page itself never scrolls sideways (only the table may, inside Django's `.results`);
- the first columns (which row, and where it stands) are on screen without scrolling;
- every other column comes into view by scrolling the table, not the page;
- the search box, the action menu and its Go button are fully on screen, and work: a
  search finds a row and an action reaches its confirmation page.
Screenshots land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger_app.models import Charge, Refund
from tests.browser.admin_lists import LISTS, AdminList
from tests.browser.chromium import DESKTOP, PHONE

# The live server answers from its own thread, so test data must really be committed.
# Layout only: the same pages whatever the database, so `make test` runs these in its
# SQLite pass and not again in the PostgreSQL one (scripts/run-tests).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.any_database]


# Widths as the browser lays the list out: the page, the table's scrolling box (`.results`)
# and each column header's edges, by list_display name.
MEASURE = """() => {
    const results = document.querySelector("#changelist-form .results");
    const columns = {};
    for (const th of document.querySelectorAll("#result_list thead th")) {
        const name = [...th.classList].find((c) => c.startsWith("column-"));
        if (name) {
            const box = th.getBoundingClientRect();
            columns[name.slice(7)] = {left: box.left, right: box.right};
        }
    }
    const box = results.getBoundingClientRect();
    return {
        page: document.documentElement.scrollWidth,
        window: window.innerWidth,
        table: results.scrollWidth,
        shown: results.clientWidth,
        results_left: box.left,
        results_right: box.right,
        overflow: getComputedStyle(results).overflowX,
        rows: document.querySelectorAll("#result_list tbody tr").length,
        columns,
    };
}"""


def measure(page, admin_list: AdminList) -> dict:
    page.goto(admin_list.url)
    sizes = page.evaluate(MEASURE)
    assert sizes["rows"] >= 1, f"{admin_list.model}: the list shows no rows to measure"
    return sizes


def missing_columns(admin_list: AdminList, sizes: dict) -> list[str]:
    return [c for c in admin_list.columns if c not in sizes["columns"]]


WIDE = {"width": 1600, "height": 900}


# Each test walks every list on one signed-in page: the widest rows and a superuser's
# sign-in are made once per width, not once per list (about 2.5 s each), and every list
# is measured even when one fails; the failure names each list and what is wrong with it.


def problems_at_laptop_width(page, admin_list: AdminList, size: dict) -> list[str]:
    sizes = measure(page, admin_list)
    found = []
    sidebar_shown = page.locator("#nav-sidebar").is_visible()
    if sidebar_shown != (size["width"] >= 1600):
        found.append(f"the sidebar is {'shown' if sidebar_shown else 'hidden'}")
    if missing := missing_columns(admin_list, sizes):
        found.append(f"columns missing: {missing}")
    if sizes["page"] > sizes["window"]:
        found.append(f"the page scrolls sideways: {sizes}")
    if sizes["table"] > sizes["shown"]:
        found.append(f"the table scrolls sideways: {sizes}")
    cut_off = {
        name: box
        for name, box in sizes["columns"].items()
        if box["left"] < 0 or box["right"] > sizes["window"]
    }
    if cut_off:
        found.append(f"column headers outside the window: {cut_off}")
    return found


@pytest.mark.parametrize("size", [DESKTOP, WIDE], ids=["1280px", "1600px"])
def test_each_list_fits_a_laptop(superuser_page, widest_rows, size, screenshot):
    page = superuser_page
    page.set_viewport_size(size)
    problems = {}

    for admin_list in LISTS:
        problems[admin_list.model] = problems_at_laptop_width(page, admin_list, size)
        screenshot(page, f"list-{size['width']}px-{admin_list.model}")

    assert {model: found for model, found in problems.items() if found} == {}
    assert len(problems) == len(LISTS) >= 13


def problems_on_a_phone(page, admin_list: AdminList) -> list[str]:
    sizes = measure(page, admin_list)
    found = []
    if missing := missing_columns(admin_list, sizes):
        return [f"columns missing: {missing}"]
    if sizes["page"] > sizes["window"]:
        found.append(f"the page scrolls sideways: {sizes}")
    if sizes["overflow"] not in {"auto", "scroll"}:
        found.append("the table cannot scroll on its own")
    first = {name: sizes["columns"][name] for name in admin_list.phone_first}
    hidden = {n: b for n, b in first.items() if b["right"] > sizes["results_right"] + 0.5}
    if hidden:
        found.append(f"first columns not on screen: {hidden} ({sizes})")
    # The rest comes into view by scrolling the table, not the page.
    page.eval_on_selector(
        "#changelist-form .results", "(el) => { el.scrollLeft = el.scrollWidth; }"
    )
    last = page.locator("#result_list thead th").last.bounding_box()
    if last["x"] + last["width"] > PHONE["width"] + 0.5:
        found.append(f"the last column does not come into view: {last}")
    if page.evaluate("document.documentElement.scrollWidth") > PHONE["width"]:
        found.append("scrolling the table scrolled the page")
    controls = []
    if page.locator("#changelist-search").count():
        controls += ["#searchbar", "#changelist-search input[type=submit]"]
    if page.locator("select[name=action]").count():
        controls += ["select[name=action]", "#changelist-form button[name=index]"]
    found += [
        f"{control} is not fully on screen" for control in controls if not on_screen(page, control)
    ]
    return found


def test_each_list_is_usable_on_a_390px_phone(superuser_page, widest_rows, screenshot):
    page = superuser_page
    page.set_viewport_size(PHONE)
    problems = {}

    for admin_list in LISTS:
        problems[admin_list.model] = problems_on_a_phone(page, admin_list)
        screenshot(page, f"list-390px-{admin_list.model}")

    assert {model: found for model, found in problems.items() if found} == {}
    assert len(problems) == len(LISTS) >= 13


def on_screen(page, selector: str) -> bool:
    element = page.locator(selector).first
    box = element.bounding_box()
    return (
        element.is_visible()
        and element.is_enabled()
        and box is not None
        and box["x"] >= 0
        and box["x"] + box["width"] <= page.viewport_size["width"]
    )


def test_on_a_phone_an_agent_finds_a_charge_by_amount_and_opens_its_bulk_refund(
    superuser_page, widest_rows, screenshot
):
    """What a person does on a phone: type an amount in the search box, tick the charge
    found, choose the bulk refund and press Go. The confirmation page comes up with its
    button on screen, and nothing is refunded until it is confirmed."""
    page = superuser_page
    page.set_viewport_size(PHONE)
    kwd = Charge.objects.get(currency="kwd")
    refunds_before = Refund.objects.count()
    page.goto(reverse("admin:ledger_app_charge_changelist"))

    page.fill("#searchbar", "99,999.999")
    page.press("#searchbar", "Enter")

    page.wait_for_url("**/?q=99%2C999.999")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert kwd.pk in rows.first.inner_text()
    assert "KWD99,999.999" in rows.first.inner_text()
    page.check(f"input.action-select[value='{kwd.pk}']")
    page.select_option("select[name=action]", "refund_in_full")
    screenshot(page, "list-390px-search-and-action")
    page.click("#changelist-form button[name=index]")

    page.wait_for_selector("body.refund-in-full-confirmation")
    assert kwd.pk in page.inner_text("#content")
    assert on_screen(page, "input[type=submit][value='Yes, refund them in full']")
    assert Refund.objects.count() == refunds_before


def test_a_refund_is_found_by_its_id_on_a_phone(superuser_page, widest_rows):
    page = superuser_page
    page.set_viewport_size(PHONE)
    refund = Refund.objects.get(status=Refund.Status.UNKNOWN)
    page.goto(reverse("admin:ledger_app_refundattention_changelist"))

    page.fill("#searchbar", refund.pk)
    page.click("#changelist-search input[type=submit]")

    rows = page.locator("#result_list tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1
    assert page.locator("#result_list tbody tr th a").inner_text() == refund.pk
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_a_long_value_is_cut_short_on_screen_but_whole_in_the_page(superuser_page, widest_rows):
    """Clipped text keeps all of itself: the title shows it on hover, and it is all in the
    page for a screen reader or the browser's find."""
    from tests.browser.wide_rows import LONG_CUSTOMER

    page = superuser_page
    page.set_viewport_size(DESKTOP)
    page.goto(reverse("admin:ledger_app_charge_changelist"))

    cell = page.locator("#result_list td.field-customer_and_description .clip").first
    box = cell.bounding_box()

    assert cell.get_attribute("title") == LONG_CUSTOMER
    assert cell.text_content() == LONG_CUSTOMER
    assert box["width"] < 200  # shown cut short, not at its ~1,600 px
    assert page.evaluate("(el) => el.scrollWidth > el.clientWidth", cell.element_handle()), (
        "the customer reference is not actually cut short"
    )
