"""A real browser for the admin: Playwright's Python API driving Debian's chromium.

Without chromium (or without the `playwright` package) these tests skip loudly, and
under CI=true they fail instead. Playwright never downloads a browser here: it launches
the one apt installed, by its path.

Only the fixtures and pytest's hooks are here; what the tests import is in chromium.py
(the browser), admin_pages.py (what a person does in the admin) and wide_rows.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from ledger_app.models import Charge, Refund
from tests.browser.admin_pages import AGENT, VIEWER, signed_in, support_agents_group
from tests.browser.chromium import (
    AXE_SCRIPT,
    DESKTOP,
    FLAVOURS,
    PLAYWRIGHT_ONLY_SWITCHES,
    SCREENSHOTS,
    TIMEOUT_MS,
    BrowserProblems,
    launch,
    why_no_browser,
)
from tests.browser.wide_rows import (
    LONG_CUSTOMER,
    LONG_DESCRIPTION,
    LONG_DETAIL,
    LONG_KEY,
    LONG_URL,
    LONG_USERNAME,
)
from tests.conftest import IN_CI
from tests.second_factor import device_of

_skipped: list[str] = []
_skipped_for_axe: list[str] = []


@pytest.fixture(scope="session")
def playwright_api() -> Iterator[object]:
    """Playwright's sync API, started once for the run, or a loud skip without chromium."""
    why = why_no_browser()
    if why is not None:
        reason = (
            f"NEEDS CHROMIUM: {why}. These tests drive the admin in a real browser and "
            "prove nothing until they run. Install it with `apt-get install chromium` "
            "(and `pip install playwright`; never `playwright install`), or set CHROMIUM_PATH."
        )
        if IN_CI:
            pytest.fail(f"CI=true and the browser tests cannot run. {reason}")
        pytest.skip(reason)

    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop running on this thread, so Django would
    # refuse ORM calls from the test body and fixtures. They are plain synchronous calls
    # here; allow them only while the browser is up.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            yield playwright
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="session")
def browser(playwright_api) -> Iterator[object]:
    """One chromium for the whole run; each test gets its own context (cookies, viewport)."""
    yield from launch(playwright_api)


@pytest.fixture(scope="session")
def browser_as_shipped(playwright_api) -> Iterator[object]:
    """Chromium without the switches Playwright adds that change Back and reload, as a
    person's browser runs: Back may restore a page from the back/forward cache, and a
    reload of a page that answered a POST may prompt before posting again (headless
    Chromium shows no prompt and posts)."""
    yield from launch(playwright_api, ignore_default_args=PLAYWRIGHT_ONLY_SWITCHES)


@pytest.fixture
def browser_problems() -> BrowserProblems:
    return BrowserProblems()


@pytest.fixture
def page(request, live_server, browser_problems) -> Iterator[object]:
    """A fresh desktop-sized tab on the live server; fails the test on any page error.
    Parametrized indirectly with FLAVOURS, it comes from either chromium."""
    flavour = getattr(request, "param", "playwright")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown browser flavour {flavour!r}")
    chromium = request.getfixturevalue(
        "browser_as_shipped" if flavour == "as-shipped" else "browser"
    )
    context = chromium.new_context(base_url=live_server.url, viewport=DESKTOP)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    browser_problems.watch(tab)
    yield tab
    context.close()
    assert not browser_problems.errors, "\n".join(browser_problems.errors)


@pytest.fixture
def screenshot() -> Callable[..., Path]:
    """screenshot(page, "name") saves test-artifacts/screenshots/name.png (whole page)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings):
    """Every test makes a user, and many log in through the form: a cheap hasher saves
    about 0.4 s each. The live server runs in this process, so it uses the same setting."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def support_agent(django_user_model):
    """A staff member in the Support agents group."""
    user = django_user_model.objects.create_user(AGENT[0], password=AGENT[1], is_staff=True)
    user.groups.add(support_agents_group())
    device_of(user)  # refunds need a code from their authenticator
    return user


@pytest.fixture
def viewer(django_user_model):
    """Staff who may look at charges and refunds but not refund."""
    user = django_user_model.objects.create_user(VIEWER[0], password=VIEWER[1], is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="ledger_app",
            codename__in=["view_charge", "view_refund", "view_refundattention"],
        )
    )
    return user


@pytest.fixture
def agent_page(page, support_agent, live_server):
    signed_in(page, support_agent, live_server.url)
    return page


@pytest.fixture(scope="session")
def axe_script() -> Path:
    """The axe-core script the accessibility tests inject into each page (no network), or
    a loud skip without it (a failure under CI=true), as for a missing chromium."""
    if not AXE_SCRIPT.is_file():
        reason = (
            f"NEEDS AXE-CORE: no {AXE_SCRIPT}. These tests check the admin's pages for "
            "WCAG 2 A/AA violations and prove nothing until they run. `make test` installs "
            "it (npm install --prefix .venv/node axe-core), or set AXE_CORE_PATH."
        )
        if IN_CI:
            pytest.fail(f"CI=true and the accessibility tests cannot run. {reason}")
        pytest.skip(reason)
    return AXE_SCRIPT


def pytest_runtest_logreport(report):
    if report.skipped and "NEEDS CHROMIUM" in str(report.longrepr):
        _skipped.append(report.nodeid)
    if report.skipped and "NEEDS AXE-CORE" in str(report.longrepr):
        _skipped_for_axe.append(report.nodeid)


def pytest_terminal_summary(terminalreporter):
    if _skipped_for_axe:
        terminalreporter.section("NOT PROVEN: accessibility tests skipped", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(_skipped_for_axe)} accessibility tests were skipped for want of axe-core; "
            "`make test` installs it (npm).",
            red=True,
        )
    if _skipped:
        terminalreporter.section("NOT PROVEN: browser tests skipped", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(_skipped)} browser tests were skipped for want of chromium; "
            "`apt-get install chromium` and run them again.",
            red=True,
        )


@pytest.fixture
def superuser_page(page, django_user_model, live_server):
    """The page logged in as a superuser with a fresh second factor: one who sees every
    list, including users and sign-in failures."""
    user = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-123")
    signed_in(page, user, live_server.url)
    return page


@pytest.fixture
def widest_rows(settings, django_user_model) -> dict[str, object]:
    """At least one row in every admin list, each as wide as real data can make it: the
    largest amounts (in a 3-decimal currency and in IDR's twelve digits), ids at their
    64-character limit, customer references, descriptions, status details, keys, URLs,
    names and user agents at their limits. Money moves only through the services, so the
    ledger stays consistent; only text a person or the provider writes is lengthened."""
    from axes.models import AccessAttempt
    from django.test.utils import override_settings
    from django.utils import timezone

    from ledger_app.access.api_keys import create_api_key
    from ledger_app.charges.services import record_charge
    from ledger_app.models import LedgerEntry, RefundLimit, WebhookDelivery, WebhookEndpoint
    from ledger_app.refunds.services import RefundRequest, create_refund

    settings.REFUND_DISPATCH = "inline"
    WebhookEndpoint.objects.create(
        url=LONG_URL,
        enabled_events=["charge.succeeded", "charge.refunded", "refund.created", "refund.updated"],
        description="Merchant platform",
        secret="whsec_widths",
    )
    charge = partial(record_charge, customer=LONG_CUSTOMER, description=LONG_DESCRIPTION)
    largest = charge(amount=99_999_999, currency="usd")
    charge(amount=999_999_999_999, currency="idr")
    idr = charge(amount=999_999_999_999, currency="idr")
    kwd = charge(amount=99_999_999, currency="kwd")
    charge(amount=99_999_999, currency="usd", charge_id="ch_" + "imported" * 7 + "Z")  # 64
    failed = charge(amount=99_999_999, currency="usd", status=Charge.Status.FAILED)
    Charge.objects.filter(pk=failed.pk).update(status_detail=LONG_DETAIL)
    declines = charge(amount=99_999_999, currency="usd", metadata={"simulate_refund": "decline"})
    times_out = charge(  # the widest amount in the needing-attention queue
        amount=999_999_999_999, currency="idr", metadata={"simulate_refund": "timeout"}
    )
    waits = charge(amount=99_999_999, currency="usd")

    requester = django_user_model.objects.create_user(
        LONG_USERNAME,
        email=LONG_USERNAME[:48] + "example-holdings.co.uk",
        first_name="Maximiliane-Alexandra",
        last_name="Vandenberghe-Oppenheimer",
        is_staff=True,
    )
    api_key, _ = create_api_key(name="Checkout service, EMEA production cluster " + "k" * 57)

    def refund(**fields):
        return create_refund(
            RefundRequest(reason=Refund.Reason.REQUESTED_BY_CUSTOMER, note=LONG_DETAIL, **fields)
        )

    refund(charge_id=largest.pk, amount=99_999_998, idempotency_key=LONG_KEY, actor=requester)
    refund(charge_id=kwd.pk, amount=12_345_678, actor=requester)
    refund(charge_id=idr.pk, amount=999_999_999_998, actor=requester)
    refund(charge_id=declines.pk, amount=99_999_999, actor=requester)
    refund(charge_id=times_out.pk, amount=999_999_999_999, actor=requester)
    with override_settings(REFUND_DISPATCH="worker"):  # queued an hour ago, never sent
        stale = refund(charge_id=largest.pk, amount=1, actor="cli:ops")
    RefundLimit.objects.create(user=requester, currency="usd", per_refund=10_000)
    RefundLimit.objects.create(
        group=support_agents_group(), currency="kwd", per_refund=99_999_999, per_day=99_999_999
    )
    RefundLimit.objects.create(api_key=api_key, currency="idr", per_day=999_999_999_999)
    refund(charge_id=waits.pk, amount=99_999_999, actor=requester)  # over the user's limit
    Refund.objects.filter(pk=stale.item.pk).update(created_at=timezone.now() - timedelta(hours=1))
    Refund.objects.exclude(status=Refund.Status.AWAITING_APPROVAL).update(
        status_detail=LONG_DETAIL, dispatch_attempts=12_345
    )
    WebhookDelivery.objects.update(
        last_status_code=503, last_error="HTTP 503: " + LONG_DETAIL, attempts=12_345
    )
    AccessAttempt.objects.create(
        username=LONG_USERNAME + "." + "y" * 104,  # 255
        ip_address="2001:0db8:85a3:0000:0000:8a2e:0370:7334",
        user_agent=("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 " * 5)[:255],
        http_accept="text/html",
        path_info="/admin/login/" + "p" * 200,
        failures_since_start=12_345,
    )
    widest_books(idr.pk)
    assert LedgerEntry.objects.exists()
    return {"requester": requester, "api_key": api_key}


def widest_books(charge_id: str) -> None:
    """Today's books closed against a balance transaction of the largest refund for one
    minor unit less, in a payout, both with long provider ids: every other refund is missing
    at the provider, that one's amount differs, all in the widest amounts."""
    from django.utils import timezone

    from ledger_app.books.services import close_day, record_payout
    from ledger_app.models import BalanceTransaction, Payout

    refund = Refund.objects.get(charge_id=charge_id)
    now = timezone.now()
    listed = BalanceTransaction(
        id="txn_" + "1A2b3C4d" * 7,
        type="refund",
        source=refund.provider_refund_id,
        amount=-(refund.amount - 1),
        net=-(refund.amount - 1),
        currency=refund.currency,
        status="available",
        created=now,
        available_on=now,
    )
    payout = Payout(
        id="po_" + "9Z8y7X6w" * 7,
        amount=-999_999_999_999,
        currency="idr",
        status="paid",
        arrival_date=now,
        created=now,
    )
    record_payout(payout, [listed])
    close_day(now.date(), now.date())
