"""The browser the tests drive: Debian's chromium through Playwright (never a downloaded
one), how it is launched, the sizes it is shown at, and what it reports of a page that a
screenshot would not show (BrowserProblems). conftest.py makes the fixtures from these."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",  # the tests may run as root (CI containers do)
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = PROJECT_ROOT / "test-artifacts" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 10_000
# Playwright launches Chromium with these; a person's Chromium runs without them.
PLAYWRIGHT_ONLY_SWITCHES = ["--disable-back-forward-cache", "--disable-prompt-on-repost"]
# For @pytest.mark.parametrize("page", FLAVOURS, indirect=True): a test about Back or
# reload runs in both, since these switches are exactly what would change its outcome.
FLAVOURS = ["playwright", "as-shipped"]


def why_no_browser() -> str | None:
    if not Path(CHROMIUM).is_file() or not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the playwright package cannot be imported ({exc})"
    return None


def launch(playwright, **options) -> Iterator[object]:
    chromium = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, **options
    )
    try:
        yield chromium
    finally:
        chromium.close()


class BrowserProblems:
    """What went wrong in the page that a screenshot would not show: JS errors, console
    errors, and requests that failed or answered 4xx/5xx (a missing stylesheet, say)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.expected_statuses: set[int] = set()
        self.expected_failures: set[str] = set()
        self.tools: set[str] = set()

    def watch(self, page) -> None:
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("console", self._console)
        page.on("requestfailed", self._request_failed)
        page.on("response", self._response)

    def _console(self, message) -> None:
        url = message.location.get("url", "")
        # Failed loads are judged by _response, which knows the statuses a test expects.
        if message.text.startswith("Failed to load resource"):
            return
        if message.type == "error" and url not in self.tools:
            self.errors.append(f"console: {message.text} ({url})")

    def _request_failed(self, request) -> None:
        # A navigation the browser itself abandoned (a double click does that) is no error.
        if request.failure == "net::ERR_ABORTED" and request.is_navigation_request():
            return
        if request.failure in self.expected_failures and request.is_navigation_request():
            return
        # Chromium loads the page's icon on its own once the page is shown; a test that
        # moves on at once cancels that load. A wrong answer for it still counts (_response).
        icon = request.url.endswith(("/favicon.ico", "/favicon.svg"))
        if icon and request.failure == "net::ERR_ABORTED":
            return
        self.errors.append(f"failed: {request.method} {request.url} {request.failure}")

    def _response(self, response) -> None:
        # Every response counts, the /favicon.ico that Chromium asks for on its own too.
        if response.status >= 400 and response.status not in self.expected_statuses:
            self.errors.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    def tool_in_page(self, url: str) -> None:
        """A test's own script put in the page (axe-core): what it logs is not the page's.
        (axe-core adds a <style> the Content Security Policy refuses, as it should.)"""
        self.tools.add(url)

    def expect_status(self, status: int) -> None:
        self.expected_statuses.add(status)

    def expect_failure(self, failure: str) -> None:
        """A navigation failure the test causes on purpose, e.g. net::ERR_CACHE_MISS when
        Back returns to a page that answered a POST and Chromium will not post again."""
        self.expected_failures.add(failure)


# axe-core's browser build, from npm (`make test` installs it under the venv); AXE_CORE_PATH
# points elsewhere.
AXE_SCRIPT = Path(
    os.environ.get("AXE_CORE_PATH")
    or Path(sys.prefix) / "node" / "node_modules" / "axe-core" / "axe.min.js"
)
