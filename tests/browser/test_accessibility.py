"""The admin's pages against WCAG 2 A and AA, as axe-core finds them in a real browser.

axe-core (npm, installed by `make test` under the venv) is loaded into each page from its
file, with no network, and run for the WCAG 2.0 and 2.1 A/AA rules. It is added as an init
script (run by the browser itself in every page it opens) because the Content Security
Policy rightly refuses the inline <script> that add_script_tag would insert. A serious or
critical violation fails the test, each named with its rule, what it means and where.
The pages hold the widest rows real data makes (tests/browser/conftest.py:widest_rows).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.http import urlencode
from playwright.sync_api import Page

from ledger_app.models import BooksDifference, Charge, Refund
from tests.browser.admin_lists import LISTS
from tests.browser.admin_pages import refund_url
from tests.browser.axe import axe_violations, described, with_axe
from tests.browser.chromium import DESKTOP, PHONE

# The live server answers from its own thread, so test data must really be committed.
# Layout only: the same pages whatever the database, so `make test` runs these in its
# SQLite pass and not again in the PostgreSQL one (scripts/run-tests).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.any_database]

WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
FAILING_IMPACTS = {"serious", "critical"}


def violations(page) -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now."""
    return [v for v in axe_violations(page, WCAG_TAGS) if v["impact"] in FAILING_IMPACTS]


def largest_charge() -> Charge:
    charge = Charge.objects.filter(currency="usd", amount_refunded__gt=0).order_by("pk").first()
    assert charge is not None, "the demo data has a partly refunded USD charge"
    return charge


def charge_page(page) -> None:
    page.goto(reverse("admin:ledger_app_charge_change", args=[quote(largest_charge().pk)]))


def refund_page(page) -> None:
    waiting = Refund.objects.get(status=Refund.Status.AWAITING_APPROVAL)  # Approve/Reject
    page.goto(reverse("admin:ledger_app_refund_change", args=[quote(waiting.pk)]))


def refund_form(page) -> None:
    charge = Charge.objects.get(currency="kwd")
    page.goto(refund_url(charge))
    page.wait_for_selector("#refund-form")


def refund_form_with_errors(page) -> None:
    """The form as a refusal draws it: an error on the amount, the input kept."""
    refund_form(page)
    page.fill("#id_amount", "12.3456")
    page.select_option("#id_reason", "requested_by_customer")
    page.click("#refund-form input[type=submit][name=_refund]")
    page.wait_for_selector(".errorlist")


def action_page(model: str, action: str, pick: Callable[[], str]) -> Callable[[Page], None]:
    """The confirmation page an action draws for one selected row."""

    def open_it(page) -> None:
        page.goto(reverse(f"admin:ledger_app_{model}_changelist"))
        page.check(f"input.action-select[value='{pick()}']")
        page.select_option("select[name=action]", action)
        page.click("#changelist-form button[name=index]")
        page.wait_for_selector("#content form")

    return open_it


def books_difference_page(page) -> None:
    """A difference's page: the ledger's side beside the provider's."""
    differs = BooksDifference.objects.get(kind="amount_differs")
    page.goto(reverse("admin:ledger_app_booksdifference_change", args=[differs.pk]))


def second_factor_page(page) -> None:
    page.goto(f"{reverse('verify-second-factor')}?{urlencode({'next': '/admin/'})}")
    page.wait_for_selector("input[name=code]")


def login_page(page) -> None:
    page.context.clear_cookies()
    page.goto(reverse("admin:login"))


def index_page(page) -> None:
    page.goto(reverse("admin:index"))


def list_page(url_name: str) -> Callable[[Page], None]:
    def open_it(page: Page) -> None:
        page.goto(reverse(url_name))

    return open_it


PAGES: dict[str, Callable[[Page], None]] = {
    "index": index_page,
    **{f"list-{lst.model}": list_page(f"admin:{lst.model}_changelist") for lst in LISTS},
    "charge": charge_page,
    "refund": refund_page,
    "refund-form": refund_form,
    "refund-form-with-errors": refund_form_with_errors,
    "refund-in-full-confirmation": action_page(
        "charge", "refund_in_full", lambda: Charge.objects.get(currency="kwd").pk
    ),
    "approve-confirmation": action_page(
        "refundapproval",
        "approve_refunds",
        lambda: Refund.objects.get(status=Refund.Status.AWAITING_APPROVAL).pk,
    ),
    "explain-confirmation": action_page(
        "booksdifference",
        "explain_differences",
        lambda: str(BooksDifference.objects.filter(kind="amount_differs").get().pk),
    ),
    "books-difference": books_difference_page,
    "second-factor": second_factor_page,
    "login": login_page,
}


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1280px", "390px"])
def test_no_serious_wcag_violations(
    superuser_page, widest_rows, axe_script, browser_problems, size
):
    """Every page in one signed-in tab, in PAGES' order (the login page, which signs out,
    last): the widest rows and the sign-in are made once per width, not once per page, and
    every page is checked even when one fails."""
    page = with_axe(superuser_page, axe_script, browser_problems)
    page.set_viewport_size(size)
    found = {}

    for name, open_page in PAGES.items():
        open_page(page)
        found[name] = (page.url, violations(page))

    assert list(found) == list(PAGES) and list(PAGES)[-1] == "login"
    failing = [f"{name} ({url}):\n{described(v)}" for name, (url, v) in found.items() if v]
    assert failing == [], "axe-core found:\n" + "\n".join(failing)


def test_axe_reports_a_violation_it_is_shown(superuser_page, axe_script, browser_problems):
    """The check can fail: an image without any text alternative is a critical violation."""
    page = with_axe(superuser_page, axe_script, browser_problems)
    page.goto(reverse("admin:index"))
    page.evaluate(
        """() => { const img = document.createElement("img");
                   img.id = "no-alt"; img.src = "data:image/gif;base64,R0lGODlhAQABAAAAACw=";
                   document.querySelector("#content").append(img); }"""
    )

    found = violations(page)

    assert [v["id"] for v in found] == ["image-alt"]
    assert described(found) == (
        "image-alt (critical): Images must have alternative text at #no-alt"
    )
