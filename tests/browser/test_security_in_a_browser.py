"""The admin's protections in a real browser, on the path a person takes: a code from their
authenticator before money moves (and again after ADMIN_OTP_IDLE_MINUTES idle), the sign-in
lockout after AXES_FAILURE_LIMIT wrong passwords, and a Content Security Policy under which
the admin and the API docs still work. Screenshots land in test-artifacts/screenshots/.

Two things are simulated rather than waited for, so that the file stays fast:
- idleness: the session's `second_factor_at` is moved back past the idle time, which is
  what minutes without a code leave in the session;
- a new code: the TOTP clock (the person's app, through current_code, and django-otp's
  check on the server, which runs in this process) is moved on by one 30-second step, as
  waiting for the app's next code would do. django-otp refuses a second code from a step
  it has accepted once, so the same code cannot be entered twice.
"""

from __future__ import annotations

import re
import time
from importlib import import_module
from types import SimpleNamespace
from urllib.parse import parse_qs, unquote, urlsplit

import django_otp.oath
import django_otp.plugins.otp_totp.models as otp_totp_models
import pytest
from django.conf import settings
from django.contrib.admin.utils import quote
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger_app.admin.second_factor import FRESH_AT
from ledger_app.models import Refund
from ledger_app.refunds.services import RefundRequest, create_refund
from tests.browser.admin_pages import (
    AGENT,
    CHANGELIST,
    REFUND_BUTTON,
    at,
    at_charge_page,
    change_url,
    fill_refund_form,
    new_charge,
    refund_url,
    settled,
    wait_until,
)
from tests.second_factor import current_code, device_of

# The live server answers from its own thread, so test data must really be committed.
pytestmark = pytest.mark.django_db(transaction=True)

VERIFY = reverse("verify-second-factor")
VERIFY_BUTTON = "#content-main input[type=submit][value=Verify]"
CONFIRM_BUTTON = "input[type=submit][value='Yes, refund them in full']"
NOTHING_DONE = "Nothing was done: enter a code from your authenticator app"
WRONG_CODE = "That code is not right"

# Every securitypolicyviolation event of the page, from before its first script runs
# (Playwright's init scripts are not subject to the page's policy).
RECORD_CSP_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
    window.__cspViolations.push(
        `${event.effectiveDirective} blocked ${event.blockedURI || "inline"} ` +
        `in ${event.sourceFile || document.location.pathname}:${event.lineNumber}`
    );
}, true);
"""


# --- helpers -------------------------------------------------------------------------------


def sign_in_with_password(page, username: str = AGENT[0], password: str = AGENT[1]) -> None:
    """The login form only: signed in, and no code entered in this session yet."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(at("/admin/"))
    assert page.locator("#user-tools").is_visible(), page.content()


def asked_for_a_code(page, coming_back_to: str) -> None:
    """The page is the code page, and a right code leads to `coming_back_to` (a path with
    its query)."""
    url = urlsplit(page.url)
    assert url.path == VERIFY, f"not the code page: {page.url}"
    assert parse_qs(url.query)["next"] == [coming_back_to]
    assert page.inner_text("#content h1") == "Enter your code"
    assert page.locator("input[name=code]").is_visible()
    assert page.locator("#refund-form").count() == 0


def type_code(page, code: str) -> None:
    page.fill("input[name=code]", code)
    page.click(VERIFY_BUTTON)


def path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def form_key_in_url(page) -> str:
    query = urlsplit(page.url).query
    # The key the form issued, signed (admin/form_keys.py new_form_key): <32 hex>:<signature>.
    assert re.fullmatch(r"form=[0-9a-f]{32}:[A-Za-z0-9_-]+", unquote(query)), page.url
    return query


def a_wrong_code(device: TOTPDevice) -> str:
    """Six digits that no step django-otp would accept now (it allows one step of drift)."""
    device.refresh_from_db()
    accepted = {
        f"{totp(device.bin_key, device.step, device.t0, device.digits, device.drift + d):06d}"
        for d in range(-device.tolerance, device.tolerance + 1)
    }
    return next(code for code in ("000000", "111111", "222222", "333333") if code not in accepted)


def may_try_a_code_again(device: TOTPDevice) -> bool:
    """django-otp makes a person wait after a wrong code (1 s after the first)."""
    return TOTPDevice.objects.get(pk=device.pk).verify_is_allowed()[0]


def idle_past_the_limit(page) -> None:
    """As if the person had left the admin alone for longer than ADMIN_OTP_IDLE_MINUTES:
    the session's last code (or last money moved with one) is that much older."""
    cookie = next(c for c in page.context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME)
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key=cookie["value"])
    assert FRESH_AT in session, "the session never had a fresh code"
    session[FRESH_AT] -= settings.ADMIN_OTP_IDLE_MINUTES * 60 + 1
    session.save()


def next_code_step(monkeypatch) -> None:
    """As if the 30 s TOTP step had moved on: the person's app (current_code) and the
    server's check (TOTPDevice.verify_token, in this process) read a clock one step ahead."""
    real_time = time.time

    def ahead() -> float:
        return real_time() + 30

    monkeypatch.setattr(django_otp.oath, "time", ahead)
    monkeypatch.setattr(otp_totp_models, "time", SimpleNamespace(time=ahead))


def csp_directives(header: str) -> dict[str, list[str]]:
    return {
        name: values
        for name, *values in (part.split() for part in header.split(";") if part.strip())
    }


def csp_violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations")


# --- a code before money moves -------------------------------------------------------------


def test_an_agent_signed_in_with_a_password_enters_a_code_before_the_refund_form(
    page, support_agent, screenshot
):
    charge = new_charge(description="Blue teapot")
    sign_in_with_password(page)

    page.goto(change_url(charge))  # looking needs no code
    assert page.locator("a.refund-link").is_visible()
    page.click("a.refund-link")
    page.wait_for_url(at(VERIFY))
    asked_for_a_code(page, coming_back_to=refund_url(charge))
    screenshot(page, "second-factor-code-page")

    type_code(page, current_code(device_of(support_agent)))
    page.wait_for_url(at(refund_url(charge)))
    form_key_in_url(page)  # the form under its own key, as without a code page in between
    fill_refund_form(page, "12.34")
    page.click(REFUND_BUTTON)

    page.wait_for_url(at_charge_page(charge))
    assert "of $12.34: succeeded" in page.inner_text(".messagelist .success")
    wait_until(lambda: settled(charge))
    refund = Refund.objects.get()
    assert (refund.charge_id, refund.amount, refund.currency) == (charge.pk, 1_234, "usd")
    assert refund.created_by == support_agent
    charge.refresh_from_db()
    assert charge.amount_refunded == 1_234


def test_a_wrong_code_is_refused_on_the_page_and_the_right_one_then_works(page, support_agent):
    charge = new_charge()
    device = device_of(support_agent)
    sign_in_with_password(page)
    page.goto(refund_url(charge))
    page.wait_for_url(at(VERIFY))

    with page.expect_navigation():  # the code page again, drawn with the error
        type_code(page, a_wrong_code(device))
    asked_for_a_code(page, coming_back_to=refund_url(charge))
    assert WRONG_CODE in page.inner_text("#content-main .errorlist")
    # Still no way to the form: it sends the person back to the code page.
    page.goto(refund_url(charge))
    page.wait_for_url(at(VERIFY))
    asked_for_a_code(page, coming_back_to=refund_url(charge))
    assert not Refund.objects.exists()

    wait_until(lambda: may_try_a_code_again(device), timeout=3)
    type_code(page, current_code(device))
    page.wait_for_url(at(refund_url(charge)))
    form_key_in_url(page)
    assert page.locator(REFUND_BUTTON).is_visible()
    assert page.locator("#content-main .errorlist").count() == 0


def test_after_the_idle_time_a_filled_form_refunds_nothing_until_a_new_code(
    agent_page, support_agent, monkeypatch
):
    page = agent_page  # signed in, code entered
    charge = new_charge()
    page.goto(refund_url(charge))
    key = form_key_in_url(page)
    fill_refund_form(page, "12.34")

    idle_past_the_limit(page)
    page.click(REFUND_BUTTON)

    page.wait_for_url(at(VERIFY))
    sent_from = f"{refund_url(charge)}?{key}"
    asked_for_a_code(page, coming_back_to=sent_from)  # back to the same form afterwards
    assert NOTHING_DONE in page.inner_text(".messagelist .warning")
    assert not Refund.objects.exists()
    charge.refresh_from_db()
    assert charge.amount_refunded == 0

    next_code_step(monkeypatch)  # the code already entered is not accepted twice
    type_code(page, current_code(device_of(support_agent)))
    page.wait_for_url(at(refund_url(charge)))
    assert path_and_query(page.url) == sent_from
    assert page.locator(REFUND_BUTTON).is_visible()
    fill_refund_form(page, "12.34")
    page.click(REFUND_BUTTON)

    page.wait_for_url(at_charge_page(charge))
    assert "of $12.34: succeeded" in page.inner_text(".messagelist .success")
    wait_until(lambda: settled(charge))
    assert list(Refund.objects.values_list("amount", flat=True)) == [1_234]
    charge.refresh_from_db()
    assert charge.amount_refunded == 1_234


def test_the_bulk_refund_without_a_fresh_code_asks_for_one_and_refunds_nothing(page, support_agent):
    charge = new_charge(amount=2_500)
    changelist = reverse(CHANGELIST)
    sign_in_with_password(page)

    def run_the_bulk_refund() -> None:
        page.goto(changelist)
        page.check(f"input.action-select[value='{charge.pk}']")
        page.select_option("select[name=action]", "refund_in_full")
        page.click("button[name=index]")

    run_the_bulk_refund()
    page.wait_for_url(at(VERIFY))
    asked_for_a_code(page, coming_back_to=changelist)
    assert NOTHING_DONE in page.inner_text(".messagelist .warning")
    assert not Refund.objects.exists()

    type_code(page, current_code(device_of(support_agent)))
    page.wait_for_url(at(changelist))
    assert page.locator(f"input.action-select[value='{charge.pk}']").is_visible()

    run_the_bulk_refund()
    page.wait_for_selector("body.refund-in-full-confirmation")
    assert charge.pk in page.inner_text("#content table")
    assert not Refund.objects.exists()  # not before the confirmation
    page.select_option("#id_reason", "duplicate")
    page.fill("#id_note", "Charged twice.")
    with page.expect_navigation():
        page.click(CONFIRM_BUTTON)

    assert urlsplit(page.url).path == changelist
    assert page.inner_text(".messagelist .success").startswith("Refunded:")
    wait_until(lambda: settled(charge))
    assert list(Refund.objects.values_list("charge_id", "amount")) == [(charge.pk, 2_500)]


# --- sign-in lockout -------------------------------------------------------------------------


def test_after_too_many_wrong_passwords_even_the_right_one_is_locked_out(
    page, support_agent, browser_problems, screenshot
):
    browser_problems.expect_status(429)
    limit = settings.AXES_FAILURE_LIMIT  # LOGIN_FAILURE_LIMIT, 5 by default

    def attempt(password: str) -> int:
        page.goto("/admin/login/?next=/admin/")
        page.fill("#id_username", AGENT[0])
        page.fill("#id_password", password)
        with page.expect_navigation() as answer:
            page.click("input[type=submit]")
        return answer.value.status

    statuses = [attempt(f"wrong-password-{n}") for n in range(limit)]
    # Each failure before the limit shows the form again; the one that reaches it locks.
    assert statuses == [200] * (limit - 1) + [429]

    assert attempt(AGENT[1]) == 429
    assert page.inner_text("#content h1") == "Signing in is locked for a while"
    minutes = settings.AXES_COOLOFF_TIME.total_seconds() / 60
    assert f"Try again in {minutes:g} minutes" in page.inner_text("#content .errornote")
    assert page.locator("#user-tools").count() == 0
    screenshot(page, "sign-in-locked")

    page.goto("/admin/")  # not signed in: the admin sends them to the login page
    page.wait_for_url(at("/admin/login/"))
    assert page.locator("#user-tools").count() == 0
    # Nor from a fresh browser session (no cookies) with the right password.
    other = page.context.browser.new_context(base_url=page.url.split("/admin/")[0])
    try:
        tab = other.new_page()
        browser_problems.watch(tab)
        tab.goto("/admin/login/?next=/admin/")
        tab.fill("#id_username", AGENT[0])
        tab.fill("#id_password", AGENT[1])
        with tab.expect_navigation() as answer:
            tab.click("input[type=submit]")
        assert answer.value.status == 429
        assert tab.inner_text("#content h1") == "Signing in is locked for a while"
        assert tab.locator("#user-tools").count() == 0
    finally:
        other.close()


# --- Content Security Policy -----------------------------------------------------------------


def test_the_api_docs_render_under_the_content_security_policy(page):
    page.add_init_script(RECORD_CSP_VIOLATIONS)

    response = page.goto("/v1/docs")

    assert response.status == 200
    policy = csp_directives(response.headers["content-security-policy"])
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    page.wait_for_selector(".swagger-ui .opblock")
    assert "/v1/refunds" in page.inner_text(".swagger-ui")
    assert csp_violations(page) == []
    # Console errors, CSP reports among them, fail the test through browser_problems.


def test_admin_pages_open_with_no_content_security_policy_violation(
    page, support_agent, browser_problems
):
    page.add_init_script(RECORD_CSP_VIOLATIONS)
    charge = new_charge(description="Blue teapot")
    refund = create_refund(RefundRequest(charge_id=charge.pk, amount=1_000)).item
    sign_in_with_password(page)
    violations: dict[str, list[str]] = {}

    def check(what: str) -> None:
        page.wait_for_load_state()
        violations[what] = csp_violations(page)

    response = page.goto(reverse("admin:index"))
    assert "script-src 'self'" in response.headers["content-security-policy"]
    check("index")
    # The policy is enforced, not only sent: an inline script is refused.
    with page.expect_console_message(lambda m: "Content Security Policy" in m.text):
        ran = page.evaluate(
            """() => new Promise((resolve) => {
                document.addEventListener("securitypolicyviolation", () => resolve(!!window.__ran));
                const script = document.createElement("script");
                script.textContent = "window.__ran = true";
                document.body.append(script);
            })"""
        )
    assert ran is False
    browser_problems.errors[:] = [e for e in browser_problems.errors if "inline script" not in e]

    page.goto(change_url(charge))
    check("charge page")
    page.click("a.refund-link")
    page.wait_for_url(at(VERIFY))
    check("code page")
    type_code(page, current_code(device_of(support_agent)))
    page.wait_for_url(at(refund_url(charge)))
    check("refund form")
    page.goto(reverse(CHANGELIST))
    check("charge list")
    page.check(f"input.action-select[value='{charge.pk}']")
    page.select_option("select[name=action]", "refund_in_full")
    page.click("button[name=index]")
    page.wait_for_selector("body.refund-in-full-confirmation")
    check("bulk refund confirmation")
    for what, url in [
        ("refund list", reverse("admin:ledger_app_refund_changelist")),
        ("refund page", reverse("admin:ledger_app_refund_change", args=[quote(refund.pk)])),
        ("needs-attention queue", reverse("admin:ledger_app_refundattention_changelist")),
        ("ledger entries", reverse("admin:ledger_app_ledgerentry_changelist")),
    ]:
        assert page.goto(url).status == 200, what
        check(what)

    assert {what: found for what, found in violations.items() if found} == {}
    assert len(violations) == 10
