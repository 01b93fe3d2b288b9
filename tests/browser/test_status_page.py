"""The customer's refund status page in a real browser, opened from the link their mail
holds (ledger_app/customer_mail/links.py: status_url, here on the live server's address),
at a small phone's width (375 px) and a laptop's (1280 px): the refund's state, amount,
card ending and trace number (ARN) are on screen, the page never scrolls sideways, and
axe-core finds no violation at all (of any impact, WCAG or best practice).

axe-core is loaded as tests/browser/test_accessibility.py loads it: an init script from its
file (the Content Security Policy refuses an inline <script>), with no network. The
customer needs no sign-in, so no second factor here. Screenshots land in
test-artifacts/screenshots/."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ledger_app.customer_mail.links import status_url
from ledger_app.models import Charge, Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.axe import axe_violations, described, with_axe
from tests.browser.chromium import DESKTOP
from tests.factories import ChargeFactory

# The live server answers from its own thread, so test data must really be committed.
# Layout only: the same page whatever the database, so `make test` runs these in its
# SQLite pass and not again in the PostgreSQL one (scripts/run-tests).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.any_database,
    pytest.mark.usefixtures("inline_dispatch"),
]

SMALL_PHONE = {"width": 375, "height": 812}
SIZES = [SMALL_PHONE, DESKTOP]
SIZE_IDS = ["375px", "1280px"]


@dataclass(frozen=True)
class Shown:
    """A refund as the test makes it, and what its page must show of it."""

    language: str
    amount: int
    currency: str
    card_last4: str
    reference: str
    amount_shown: str
    state_shown: str | None  # None: the state's words are translated (German)


# A usual card refund in English, and the widest a German page gets: IDR's twelve digits
# and a reference as long as one may be stored (64 letters and digits, no break in it).
TYPICAL = Shown(
    "en", 1_250, "eur", "4242", "74987654321012345678901", "€12.50", "Sent to your bank"
)
WIDEST = Shown(
    "de",
    999_999_999_999,
    "idr",
    "0005",
    ("ARN" + "74987654321012345678901" * 3)[:64],
    "999.999.999.999\xa0IDR",
    None,
)
assert len(WIDEST.reference) == 64  # Refund.destination_reference's max_length
CASES = [TYPICAL, WIDEST]
CASE_IDS = ["en-typical", "de-widest"]

# What would make a reader scroll sideways, and the stylesheet having been applied.
MEASURE = """() => ({
    page: document.documentElement.scrollWidth,
    window: window.innerWidth,
    styled: getComputedStyle(document.querySelector("main")).maxWidth !== "none",
})"""


def violations(page) -> list[str]:
    """Every axe-core violation, of every rule it runs by default and of any impact."""
    return described(axe_violations(page)).splitlines()


def link_to(case: Shown) -> str:
    """The link a mail about a new succeeded refund of `case` would hold."""
    charge = ChargeFactory(amount=case.amount, currency=case.currency)
    Charge.objects.filter(pk=charge.pk).update(card_last4=case.card_last4)
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=case.amount)).item
    assert refund.status == Refund.Status.SUCCEEDED
    Refund.objects.filter(pk=refund.pk).update(destination_reference=case.reference)
    return status_url(refund.pk, case.language, refund.customer_email)


@pytest.fixture
def links_to_the_live_server(settings, live_server):
    """The mails' links point at the live server (it runs in this process, so it reads
    the same settings)."""
    settings.REFUND_STATUS_BASE_URL = live_server.url
    return live_server.url


def not_on_screen(page, locator, name: str) -> list[str]:
    """Why the element is not wholly on screen across, if it is not."""
    if locator.count() != 1:
        return [f"{name}: {locator.count()} found"]
    if not locator.is_visible():
        return [f"{name} is not visible"]
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    if box is None or box["x"] < 0 or box["x"] + box["width"] > width + 0.5:
        return [f"{name} is not within the {width} px window: {box}"]
    return []


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_the_status_page_from_a_mails_link(
    page, links_to_the_live_server, axe_script, browser_problems, screenshot, size, case
):
    url = link_to(case)
    assert url.startswith(links_to_the_live_server + "/refund-status/")
    page = with_axe(page, axe_script, browser_problems)
    page.set_viewport_size(size)

    answer = page.goto(url)

    assert answer is not None and answer.status == 200
    assert page.get_attribute("html", "lang") == case.language
    screenshot(page, f"status-page-{size['width']}px-{case.language}")
    state = page.locator('.state[data-state="sent"]')
    card = page.locator("dd", has_text=case.card_last4)
    problems = [
        *not_on_screen(page, state, "the state"),
        *not_on_screen(page, page.locator("dd", has_text=case.amount_shown), "the amount"),
        *not_on_screen(page, card, "the card ending"),
        *not_on_screen(page, page.locator("dd > code", has_text=case.reference), "the ARN"),
    ]
    assert problems == []
    if case.state_shown is not None:
        assert state.inner_text() == case.state_shown
        assert card.inner_text() == f"your card ending in {case.card_last4}"
    sizes = page.evaluate(MEASURE)
    assert sizes["styled"], "status.css was not applied"
    assert sizes["page"] <= sizes["window"], f"the page scrolls sideways: {sizes}"
    assert violations(page) == []


def test_the_checks_see_what_they_are_for(
    page, links_to_the_live_server, axe_script, browser_problems
):
    """They can fail on this page: a line too wide for the window makes it scroll
    sideways, and a page without its language is an axe-core violation."""
    page = with_axe(page, axe_script, browser_problems)
    page.set_viewport_size(SMALL_PHONE)
    page.goto(link_to(TYPICAL))
    assert page.evaluate(MEASURE)["page"] <= SMALL_PHONE["width"]
    assert violations(page) == []

    page.evaluate(
        """() => { const wide = document.createElement("pre");
                   wide.textContent = "0".repeat(200);
                   document.querySelector("main").append(wide);
                   document.documentElement.removeAttribute("lang"); }"""
    )

    assert page.evaluate(MEASURE)["page"] > SMALL_PHONE["width"]
    assert [v.split(" ", 1)[0] for v in violations(page)] == ["html-has-lang"]
