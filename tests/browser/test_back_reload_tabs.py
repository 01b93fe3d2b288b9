"""Back, reload, a second tab and a double click on the admin's refund forms, done with the
browser's own actions: what each leaves in the database and what the page tells the person.

Tests about Back and reload run in both FLAVOURS (see conftest): Playwright's Chromium and
Chromium without the switches Playwright adds (back/forward cache off, no repost prompt).
What Chromium did in both, which the tests below assert:
- Back to a refund form asks the server again: admin pages are sent `no-store`, which keeps
  them out of the back/forward cache even when it is on (notRestoredReasons:
  response-cache-control-no-store). The form's `?form=` URL then shows the "already used"
  page, with no Refund button.
- Reload of a page that answered a POST posts the same data again, without a prompt.
- Back to a page that answered a POST (the bulk confirmation, a refused refund form) does
  not post: Chromium shows its "Confirm Form Resubmission" page (net::ERR_CACHE_MISS) and
  posts again only on reload.
Each test also handles the other outcome a browser may choose (a restored copy of the
form), where pressing the button must replay.
"""

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from playwright.sync_api import Error as PlaywrightError

from ledger_app.models import Charge, Refund
from simulated_provider.models import ProviderRequest
from tests.browser.admin_pages import (
    CHANGELIST,
    REFUND_BUTTON,
    at,
    at_charge_page,
    fill_refund_form,
    new_charge,
    refund_url,
    settled,
    wait_until,
)
from tests.browser.chromium import FLAVOURS

# The live server answers from its own thread, so test data must really be committed.
pytestmark = pytest.mark.django_db(transaction=True)

CONFIRM_BUTTON = "input[type=submit][value='Yes, refund them in full']"
in_both_browsers = pytest.mark.parametrize("page", FLAVOURS, indirect=True)


def settled_refunds(charge) -> tuple[int, int]:
    """(refunds of the charge, its amount_refunded) once every refund has settled."""
    wait_until(lambda: settled(charge))
    charge.refresh_from_db()
    return Refund.objects.filter(charge=charge).count(), charge.amount_refunded


def provider_refund_requests() -> int:
    """Every refund request that reached the (simulated) provider."""
    return ProviderRequest.objects.filter(operation="refund").count()


def refunds_made(charge) -> tuple[int, int, int]:
    """settled_refunds(charge), then every refund request that reached the provider."""
    return (*settled_refunds(charge), provider_refund_requests())


def form_key(page) -> str:
    return page.get_attribute("#refund-form input[name=idempotency_key]", "value")


def left_to_refund(page) -> str:
    return page.inner_text(".refund-summary tr:has(th:text-is('Left to refund')) td")


def open_a_new_charges_refund_form(page, **fields) -> Charge:
    """A new charge (see new_charge), its refund form open on `page`."""
    charge = new_charge(**fields)
    page.goto(refund_url(charge))
    return charge


def another_tab(page, browser_problems):
    """A second tab of the same browser, its problems watched like the first's."""
    tab = page.context.new_page()
    browser_problems.watch(tab)
    return tab


def submit(page, button: str = REFUND_BUTTON) -> str:
    """Click a submit button and wait for the page it leads to; returns its URL."""
    with page.expect_navigation():
        page.click(button)
    return page.url


def refund_on_the_form(page, charge, amount: str, note: str = "") -> Refund:
    """Fill and submit the refund form shown; the answer is the charge page."""
    fill_refund_form(page, amount, note=note)
    page.click(REFUND_BUTTON)
    page.wait_for_url(at_charge_page(charge))
    return Refund.objects.filter(charge=charge).latest("created_at")


def back_to_a_page_that_answered_a_post(page, browser_problems, while_asked=None) -> None:
    """Press Back to a page that answered a POST. What Chromium did: it would not post
    again on its own, and showed its "Confirm Form Resubmission" page (net::ERR_CACHE_MISS)
    telling the person to reload to post again; this then reloads, which posts. A browser
    may instead show a restored copy, with no error. `while_asked`, if given, checks what
    must hold while the resubmission page is shown."""
    browser_problems.expect_failure("net::ERR_CACHE_MISS")
    try:
        page.go_back()
    except PlaywrightError as exc:
        refused = exc.message
    else:
        return  # a restored copy: nothing asked
    assert "net::ERR_CACHE_MISS" in refused
    assert "Confirm Form Resubmission" in page.inner_text("body")
    if while_asked is not None:
        while_asked()
    response = page.reload()
    assert response.request.method == "POST"


def press_whatever_submit_is_there(page, charge, refund: Refund) -> None:
    """After Back: submit a restored copy of the form if the browser shows one (it must
    replay), or see that the page shows what the form did and offers no button."""
    amount = f"${refund.amount / 100:.2f}"
    if page.locator(REFUND_BUTTON).is_visible():
        assert at_charge_page(charge)(submit(page)), page.inner_text("#content")
        warning = page.inner_text(".messagelist .warning")
        assert warning == (
            f"Already submitted: this form issued refund {refund.pk} of {amount} "
            f"({refund.status}) before. Nothing new was refunded."
        )
        return
    used = page.inner_text("p.form-used")
    assert used.startswith(
        f"This refund form was already used: it made refund {refund.pk} of {amount} "
        f"({refund.status}) by user:agent at "
    ), used
    assert used.endswith("Nothing more is refunded from it."), used
    assert page.locator("#refund-form").count() == 0
    assert page.locator("#content input[type=submit], #content button").count() == 0
    assert page.inner_text("a.back-to-charge") == "Back to the charge"
    assert page.inner_text("a.new-refund") == "Start a new refund on this charge"


# --- a. Back after a refund ----------------------------------------------------------


@in_both_browsers
@pytest.mark.parametrize("provider", ["succeeds", "declines"])
def test_back_after_a_refund_then_submitting_what_is_there_refunds_nothing_more(
    agent_page, provider
):
    page = agent_page
    declines = provider == "declines"
    charge = open_a_new_charges_refund_form(
        page, metadata={"simulate_refund": "decline"} if declines else {}
    )
    form_url = page.url

    refund = refund_on_the_form(page, charge, "1.50", note="The lid was chipped.")
    if declines:
        assert refund.status == Refund.Status.FAILED
        message = page.inner_text(".messagelist .error")
        assert message.startswith(f"Refund {refund.pk} of $1.50: failed"), message
    else:
        assert refund.status == Refund.Status.SUCCEEDED
        message = page.inner_text(".messagelist .success")
        assert message == f"Refund {refund.pk} of $1.50: succeeded."

    response = page.go_back()
    assert page.url == form_url
    # Back never posts. Chromium asked the server for the form's URL again (a copy
    # restored from the back/forward cache would come with no response).
    assert response is None or response.request.method == "GET"
    press_whatever_submit_is_there(page, charge, refund)
    # A reload of what Back showed changes nothing either.
    page.reload()
    press_whatever_submit_is_there(page, charge, refund)

    assert refunds_made(charge) == (1, 0 if declines else 150, 1)


@in_both_browsers
def test_back_after_a_refused_then_accepted_form_refunds_nothing_more(agent_page, browser_problems):
    page = agent_page
    charge = open_a_new_charges_refund_form(page)
    form_url = page.url
    page.select_option("#id_reason", "requested_by_customer")
    assert submit(page) == form_url  # blank amount: refused, the answer to a POST
    assert "(amount_required)" in page.inner_text("#refund-form .errorlist")
    refund = refund_on_the_form(page, charge, "1.50")
    assert page.inner_text(".messagelist .success") == f"Refund {refund.pk} of $1.50: succeeded."

    # Back lands on the refused submission, the answer to a POST.
    back_to_a_page_that_answered_a_post(page, browser_problems)
    assert page.url == form_url

    if page.locator(REFUND_BUTTON).is_visible():
        # The reposted refusal is drawn again as a form with the used key (what the
        # application does today). A person who now asks for another amount is refused
        # and shown what the form already did.
        page.fill("#id_amount", "2.00")
        assert submit(page) == form_url
        used = page.inner_text("p.form-used")
        assert used.startswith(
            f"This refund form was already used: it made refund {refund.pk} of $1.50 (succeeded)"
        ), used
        assert used.endswith("Nothing more is refunded from it (idempotency_key_reused)."), used
    else:
        press_whatever_submit_is_there(page, charge, refund)
    assert refunds_made(charge) == (1, 150, 1)


# --- b. Reload -------------------------------------------------------------------------


@in_both_browsers
def test_reloading_the_charge_page_after_a_refund_refunds_nothing_more(agent_page):
    page = agent_page
    charge = open_a_new_charges_refund_form(page)
    refund = refund_on_the_form(page, charge, "1.50", note="The lid was chipped.")
    assert page.inner_text(".messagelist .success") == f"Refund {refund.pk} of $1.50: succeeded."

    response = page.reload()
    # POST/redirect/GET: the page on screen came from a GET, so reload only reads it again.
    assert response.request.method == "GET"
    assert at_charge_page(charge)(page.url)
    assert page.locator(".messagelist").count() == 0  # the message was shown once
    assert page.inner_text(".field-refunded_display .readonly") == "$1.50"
    assert page.inner_text(".field-refundable_display .readonly") == "$48.50"
    assert refunds_made(charge) == (1, 150, 1)


@in_both_browsers
def test_reloading_a_refused_form_posts_it_again_and_refunds_nothing(agent_page):
    page = agent_page
    charge = open_a_new_charges_refund_form(page)
    form_url = page.url
    page.fill("#id_amount", "1.50")  # and no reason chosen
    assert submit(page) == form_url
    refusal = page.inner_text("#refund-form .errorlist")
    assert "(invalid_reason)" in refusal

    response = page.reload()
    # Chromium posted the refused form again, without asking.
    assert response.request.method == "POST"
    assert page.url == form_url
    assert page.inner_text("#refund-form .errorlist") == refusal
    assert page.inner_text("p.errornote") == "Please correct the errors below."
    assert refunds_made(charge) == (0, 0, 0)


# --- c. One rendering of the form in two tabs -------------------------------------------


@pytest.mark.parametrize("second_amount", ["1.00", "2.00"], ids=["same-fields", "other-amount"])
def test_one_rendered_form_open_in_two_tabs_refunds_once(
    agent_page, browser_problems, second_amount
):
    first = agent_page
    charge = open_a_new_charges_refund_form(first)
    second = another_tab(first, browser_problems)
    first_url = first.url
    second.goto(first_url)  # the same ?form= URL, so the same key
    assert form_key(second) == form_key(first)

    fill_refund_form(second, second_amount, note="Open twice.")
    refund = refund_on_the_form(first, charge, "1.00", note="Open twice.")
    assert first.inner_text(".messagelist .success") == f"Refund {refund.pk} of $1.00: succeeded."

    landed = submit(second)
    if second_amount == "1.00":
        # The very same request again: it replays the first tab's refund.
        assert at_charge_page(charge)(landed)
        assert second.inner_text(".messagelist .warning") == (
            f"Already submitted: this form issued refund {refund.pk} of $1.00 (succeeded) "
            "before. Nothing new was refunded."
        )
    else:
        # Another amount under a used key: refused, and the page says what the key made.
        assert landed == first_url
        used = second.inner_text("p.form-used")
        assert used.startswith(
            f"This refund form was already used: it made refund {refund.pk} of $1.00 (succeeded)"
        ), used
        assert used.endswith("Nothing more is refunded from it (idempotency_key_reused)."), used
        assert second.locator(REFUND_BUTTON).count() == 0
    assert refunds_made(charge) == (1, 100, 1)


# --- d. Two tabs, each drawn on its own ---------------------------------------------------


def assert_drawn_again_from_the_charge_now(second, charge, refund) -> None:
    """The second tab's form, refused because the first tab refunded $1.00 of $50.00: the
    notice says so, and the form is drawn again from the charge as it is now, the amount
    asked for anew and the note kept."""
    notice = second.locator("p.errornote.charge-changed")
    assert notice.inner_text() == (
        f"Charge {charge.pk} changed since this form was shown: $1.00 is refunded now and "
        "$49.00 is left. Nothing was refunded; check the charge and submit again. "
        "(charge_changed)"
    )
    assert left_to_refund(second) == "$49.00"
    assert second.inner_text("label[for=id_refund_all]") == "Refund everything left ($49.00):"
    assert refund.pk in second.inner_text("#content .history-table")
    assert second.input_value("#id_amount") == ""
    assert second.input_value("#id_note") == "Second tab."


def test_two_forms_drawn_separately_cannot_both_refund_what_they_showed(
    agent_page, browser_problems
):
    first = agent_page
    charge = open_a_new_charges_refund_form(first)
    second = another_tab(first, browser_problems)
    second.goto(refund_url(charge))  # a GET of its own: another key, the same charge state
    second_url = second.url
    assert form_key(second) != form_key(first)
    second_key = form_key(second)

    fill_refund_form(second, "1.00", note="Second tab.")
    refund = refund_on_the_form(first, charge, "1.00", note="First tab.")
    assert first.inner_text(".messagelist .success") == f"Refund {refund.pk} of $1.00: succeeded."

    assert submit(second) == second_url, "the second tab must not refund"
    assert_drawn_again_from_the_charge_now(second, charge, refund)
    assert form_key(second) == second_key
    assert settled_refunds(charge) == (1, 100)

    # Reload posts the refused submission again, with the state it was drawn against.
    response = second.reload()
    assert response.request.method == "POST"
    assert "(charge_changed)" in second.inner_text("p.errornote.charge-changed")
    assert second.input_value("#id_amount") == ""
    assert settled_refunds(charge) == (1, 100)

    # Typing the same amount on the form drawn from the charge as it is now repeats the
    # first tab's refund: the form says so and refunds nothing until it is ticked.
    second.fill("#id_amount", "1.00")
    assert submit(second) == second_url
    assert "repeat_of_earlier" in second.inner_text("#repeat-warning") or refund.pk in (
        second.inner_text("#repeat-warning")
    )
    assert settled_refunds(charge) == (1, 100)
    second.check("#id_refund_again")
    assert at_charge_page(charge)(submit(second))
    newer = Refund.objects.exclude(pk=refund.pk).get(charge=charge)
    assert second.inner_text(".messagelist .success") == f"Refund {newer.pk} of $1.00: succeeded."
    assert newer.note == "Second tab."
    assert refunds_made(charge) == (2, 200, 2)


# --- e. Double click ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["typed-amount", "everything-left-box"])
def test_a_double_click_on_refund_issues_exactly_one_refund(agent_page, how):
    page = agent_page
    # A slow provider (the simulated one answers after SIMULATED_GATEWAY_LATENCY_MS) is
    # when people double-click: the first request is still running at the second click.
    charge = new_charge(metadata={"simulate_refund": "slow"})
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)

    page.goto(refund_url(charge))
    if how == "typed-amount":
        fill_refund_form(page, "12.34")
        amount, shown = 1_234, "$12.34"
    else:
        page.check("#id_refund_all")
        page.select_option("#id_reason", "requested_by_customer")
        page.fill("#id_note", "Never delivered.")  # a full refund needs a note
        amount, shown = 5_000, "$50.00"
    # delay: 80 ms between the two clicks, like a person (with none, Chromium drops the
    # first submission before it is sent, as the HTML spec says).
    page.dblclick(REFUND_BUTTON, delay=80)

    # The first navigation is abandoned, so wait for what the second one shows.
    warning = page.locator(".messagelist .warning")
    warning.wait_for()
    assert at_charge_page(charge)(page.url)
    assert len(posts) == 2, "Chromium should have sent the form twice"
    refund = Refund.objects.get()
    assert warning.inner_text().startswith(
        f"Already submitted: this form issued refund {refund.pk} of {shown} ("
    )
    assert "Nothing new was refunded" in warning.inner_text()
    assert settled_refunds(charge) == (1, amount)
    refund.refresh_from_db()
    assert (refund.charge_id, refund.amount) == (charge.pk, amount)
    assert refund.status == Refund.Status.SUCCEEDED
    assert LogEntry.objects.filter(object_id=charge.pk).count() == 1
    assert provider_refund_requests() == 1


# --- f. The bulk confirmation ---------------------------------------------------------------


def choose_bulk_refund(page, charges) -> None:
    page.goto(reverse(CHANGELIST))
    for charge in charges:
        page.check(f"input.action-select[value='{charge.pk}']")
    page.select_option("select[name=action]", "refund_in_full")
    page.click("button[name=index]")
    page.wait_for_selector("body.refund-in-full-confirmation")


def refundable_column(page, charge) -> str:
    row = page.locator(f"#result_list tr:has(input.action-select[value='{charge.pk}'])")
    return row.locator("td.field-refundable_display").inner_text()


def confirm_a_bulk_refund(page, first, second, failed) -> None:
    """Select the three charges for a bulk refund, see what the confirmation page lists
    (two to refund, the failed one apart), and confirm it."""
    choose_bulk_refund(page, [first, second, failed])
    refundable = page.inner_text("table.refundable-charges")
    assert first.pk in refundable and second.pk in refundable
    assert failed.pk not in refundable
    assert "Not refunded (nothing to refund; not in the totals)" in page.inner_text("#content")
    apart = page.inner_text("table.not-refundable-charges")
    assert failed.pk in apart and "$7.00" in apart and "charge is failed" in apart
    assert page.locator("ul.refund-totals li").all_inner_texts() == ["USD: $35.50"]
    page.select_option("#id_reason", "duplicate")
    page.fill("#id_note", "Charged twice by the checkout bug.")
    page.click(CONFIRM_BUTTON)


def assert_the_charge_list_shows_the_bulk_refund(page, first, second, failed, untouched):
    """After confirming: back on the charge list, which says what was refunded and not."""
    page.wait_for_url(at(reverse(CHANGELIST)))
    done = page.inner_text(".messagelist .success")
    assert done.startswith("Refunded: 2 charges — ")
    assert f"{first.pk} $25.00 (re_" in done and f"{second.pk} $10.50 (re_" in done
    assert page.inner_text(".messagelist .warning") == (
        f"Not refunded, nothing to refund: 1 charge — {failed.pk} (charge is failed)"
    )
    assert refundable_column(page, first) == "— (fully refunded)"
    assert refundable_column(page, failed) == "— (charge is failed)"
    assert refundable_column(page, untouched) == "$99.99"


def assert_a_new_confirmation_offers_nothing(page, first, second, failed) -> None:
    """The confirmation drawn again from the charges as they are now: all refunded."""
    assert page.inner_text("#content p.errornote") == (
        "None of the selected charges has anything left to refund."
    )
    apart = page.inner_text("table.not-refundable-charges")
    assert f"{first.pk}\tSucceeded\t$25.00\tfully refunded" in apart
    assert f"{second.pk}\tSucceeded\t$10.50\tfully refunded" in apart
    assert f"{failed.pk}\tFailed\t$7.00\tcharge is failed" in apart
    assert page.locator("ul.refund-totals").count() == 0
    assert page.locator("#content input[type=submit]").count() == 0


@in_both_browsers
def test_back_after_a_bulk_refund_refunds_nothing_more(agent_page, browser_problems):
    page = agent_page
    first = new_charge(amount=2_500)
    second = new_charge(amount=1_050)
    failed = new_charge(amount=700, status=Charge.Status.FAILED)
    untouched = new_charge(amount=9_999)
    confirm_a_bulk_refund(page, first, second, failed)
    assert_the_charge_list_shows_the_bulk_refund(page, first, second, failed, untouched)
    assert Refund.objects.count() == 2

    # Back to the confirmation page, which answered a POST; the reload its resubmission
    # page asks for posts the selection again.
    def nothing_more_refunded():
        assert Refund.objects.count() == 2

    back_to_a_page_that_answered_a_post(page, browser_problems, nothing_more_refunded)
    page.wait_for_selector("body.refund-in-full-confirmation")

    if page.locator(CONFIRM_BUTTON).is_visible():
        # A copy of the confirmation as first drawn: confirming it again replays.
        assert at(reverse(CHANGELIST))(submit(page, CONFIRM_BUTTON))
        messages = page.inner_text(".messagelist")
        assert "Already refunded by this confirmation (replayed)" in messages
        assert first.pk in messages and second.pk in messages
    else:
        # The reposted selection drew a new confirmation from the charges as they are now.
        assert_a_new_confirmation_offers_nothing(page, first, second, failed)

    assert Refund.objects.count() == 2
    for charge in (first, second):
        assert settled_refunds(charge) == (1, charge.amount)
    assert settled_refunds(failed) == (0, 0)
    assert settled_refunds(untouched) == (0, 0)
    assert provider_refund_requests() == 2


def test_a_double_click_on_the_bulk_confirmation_refunds_each_charge_once(agent_page):
    page = agent_page
    # Slow refunds: the first confirmation is still at the provider at the second click.
    chosen = [
        new_charge(amount=2_500, metadata={"simulate_refund": "slow"}),
        new_charge(amount=1_050, metadata={"simulate_refund": "slow"}),
    ]
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    choose_bulk_refund(page, chosen)
    page.select_option("#id_reason", "duplicate")
    page.fill("#id_note", "Charged twice by the checkout bug.")
    posts.clear()

    page.dblclick(CONFIRM_BUTTON, delay=80)
    page.wait_for_url(at(reverse(CHANGELIST)))
    page.wait_for_selector(".messagelist")
    assert len(posts) == 2, "Chromium should have sent the confirmation twice"
    # The page shows the second post's answer: what the first one made is replayed.
    messages = page.inner_text(".messagelist")
    assert "Already refunded by this confirmation (replayed): " in messages
    assert all(charge.pk in messages for charge in chosen)
    for charge in chosen:
        assert settled_refunds(charge) == (1, charge.amount)
    assert Refund.objects.count() == 2
    assert provider_refund_requests() == 2


# --- g. Nothing typed, nothing ticked ---------------------------------------------------


def test_a_blank_amount_with_the_box_unticked_is_refused_and_refunds_nothing(agent_page):
    page = agent_page
    charge = open_a_new_charges_refund_form(page)
    form_url = page.url
    page.select_option("#id_reason", "requested_by_customer")
    page.fill("#id_note", "Never delivered.")
    assert submit(page) == form_url, "a blank amount must not refund"
    assert page.inner_text("#refund-form .errorlist") == (
        "Type an amount, or tick “Refund everything left” (amount_required)."
    )
    assert refunds_made(charge) == (0, 0, 0)

    # The box is drawn unticked again and names the exact amount left: ticking it is how
    # everything is refunded.
    assert not page.is_checked("#id_refund_all")
    assert page.inner_text("label[for=id_refund_all]") == "Refund everything left ($50.00):"
    page.check("#id_refund_all")
    assert at_charge_page(charge)(submit(page))
    refund = Refund.objects.get()
    assert page.inner_text(".messagelist .success") == f"Refund {refund.pk} of $50.00: succeeded."
    assert settled_refunds(charge) == (1, 5_000)
