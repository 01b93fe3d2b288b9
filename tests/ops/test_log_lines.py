"""Log lines cannot be forged (issue 44, finding 6): one record is one line, in plain text
and in JSON, whatever a request put into it. The escaping happens in the formatters
(serving/logs.py), so the tests walk every logger call of the code, each with hostile
text in every argument, and then send the finding's requests through the real app."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
from pathlib import Path

import pytest
from django.urls import reverse

from ledger_app.models import Refund
from serving.logs import (
    JsonLinesFormatter,
    LogContextFilter,
    PlainFormatter,
    RedactSecretsFilter,
    log_context,
)
from serving.request_id import RequestIdFilter, current_request_id

ROOT = Path(__file__).resolve().parents[2]
WALKED = ("ledger_app", "backoffice", "serving", "simulated_provider")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
# A line break, then a well-formed line of our own plain format, then every other kind of
# line break and a terminal escape that would erase the line on screen.
FORGED = "2026-12-07 03:00:00,000 INFO ledger_app.dispatch [-] refund re_forged sent"
HOSTILE = f"x\n{FORGED}\r\n{FORGED}\u2028{FORGED}\x85{FORGED}\x1b[2K\x0b\x0c\x1c\x1d\x1e end"
RECORD_START = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ \[.*\] "
)
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
CONVERSION = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?([a-zA-Z%])")


def log_calls() -> list[tuple[str, int, str, str | None, int, bool]]:
    """Every `log.<level>(...)` / `logger.<level>(...)` of the code: (file, line, level,
    the format string if a literal, how many arguments, whether it logs a traceback)."""
    found = []
    for package in WALKED:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LEVELS
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in {"log", "logger"}
                    and node.args
                ):
                    continue
                first = node.args[0]
                message = None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    message = first.value
                traceback = node.func.attr == "exception" or any(
                    k.arg == "exc_info" for k in node.keywords
                )
                where = path.relative_to(ROOT).as_posix()
                found.append(
                    (where, node.lineno, node.func.attr, message, len(node.args) - 1, traceback)
                )
    return found


CALLS = log_calls()


def arguments(message: str | None, count: int) -> tuple:
    """Hostile text for each %s, %r or %a; a number where the format needs one."""
    conversions = [c for c in CONVERSION.findall(message or "") if c != "%"]
    conversions += ["s"] * (count - len(conversions))
    return tuple(HOSTILE if c in "sra" else 7 for c in conversions[:count])


def handler_for(log_format: str) -> CountingHandler:
    """A handler as settings.LOGGING builds it: the same filters, the format's formatter."""
    handler = CountingHandler(io.StringIO())
    for each in (RequestIdFilter(), LogContextFilter(), RedactSecretsFilter()):
        handler.addFilter(each)
    handler.setFormatter(PlainFormatter() if log_format == "plain" else JsonLinesFormatter())
    return handler


class CountingHandler(logging.StreamHandler[io.StringIO]):
    records = 0
    log_format: str  # the `logged` fixture's

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        super().emit(record)


def assert_one_line_per_record(log_format: str, text: str, records: int) -> None:
    assert records > 0, "nothing was logged"
    lines = text.splitlines()  # every kind of line break, as a log viewer splits
    if log_format == "plain":
        starts = [line for line in lines if RECORD_START.match(line)]
        assert len(starts) == records, text
        for line in lines:
            assert RECORD_START.match(line) or line.startswith(" "), text
        assert not CONTROL.search(text.replace("\n", "")), text
    else:
        assert len(lines) == records, text
        for line in lines:
            fields = json.loads(line)
            for name, value in fields.items():
                if isinstance(value, str) and name not in {"exc_info", "stack_info"}:
                    assert not CONTROL.search(value), (name, value)


def test_the_walk_finds_the_log_calls():
    assert len(CALLS) > 40
    assert any(where == "ledger_app/admin/lookups.py" for where, *_ in CALLS)


@pytest.mark.parametrize("log_format", ["plain", "json"])
@pytest.mark.parametrize(
    ("where", "line", "level", "message", "count", "traceback"),
    CALLS,
    ids=[f"{where}:{line}" for where, line, *_ in CALLS],
)
def test_every_log_call_writes_one_line_whatever_its_arguments_hold(
    log_format, where, line, level, message, count, traceback
):
    handler = handler_for(log_format)
    exc_info = None
    if traceback:
        try:
            raise ValueError(HOSTILE)
        except ValueError as exc:
            exc_info = (type(exc), exc, exc.__traceback__)
    record = logging.LogRecord(
        "walk",
        logging.ERROR if level in {"exception", "critical"} else getattr(logging, level.upper()),
        where,
        line,
        HOSTILE if message is None else message,
        arguments(message, count),
        exc_info,
    )
    record.detail = {"given": HOSTILE}  # as an `extra=` would carry it

    token = current_request_id.set(f"req_{HOSTILE}")
    try:
        with log_context(staff_user=HOSTILE, client_address=HOSTILE):
            handler.handle(record)
    finally:
        current_request_id.reset(token)

    assert_one_line_per_record(log_format, handler.stream.getvalue(), handler.records)


@pytest.fixture(params=["plain", "json"])
def logged(request):
    """Everything the app logs during the test, through a handler like the configured one."""
    handler = handler_for(request.param)
    handler.log_format = request.param
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


@pytest.mark.django_db
class TestThroughTheApp:
    def test_a_refused_admin_filter_name_cannot_forge_a_line(self, admin_client, logged):
        """The finding: the changelist refuses the made-up filter and logs its name."""
        url = reverse(f"admin:ledger_app_{Refund._meta.model_name}_changelist")

        response = admin_client.get(url, {f"status\n{FORGED}": "1"})

        assert response.status_code in (200, 302)
        text = logged.stream.getvalue()
        assert "admin lookup refused" in text
        assert_one_line_per_record(logged.log_format, text, logged.records)

    def test_a_path_that_is_not_found_cannot_forge_a_line(self, client, logged):
        client.get("/nothing%0A" + FORGED.replace(" ", "%20") + "%E2%80%A8%0D")

        text = logged.stream.getvalue()
        assert "Not Found" in text
        assert_one_line_per_record(logged.log_format, text, logged.records)

    def test_a_user_name_at_sign_in_cannot_forge_a_line(self, client, logged, settings):
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

        client.post(
            reverse("admin:login"),
            {"username": f"sam\n{FORGED}", "password": "wrong", "next": "/admin/"},
        )

        text = logged.stream.getvalue()
        assert "sam" in text
        assert_one_line_per_record(logged.log_format, text, logged.records)

    def test_a_path_asking_for_the_second_factor_cannot_forge_a_line(
        self, client, admin_user, logged
    ):
        """Signed in without a fresh code, a write is sent to the code page, and the line
        that says so names the path as the request gave it. A carriage return, as a URL
        pattern's `.` matches it (no route matches a line feed)."""
        client.force_login(admin_user)

        client.post("/admin/ledger_app/refund/%0D" + FORGED.replace(" ", "%20") + "/change/")

        text = logged.stream.getvalue()
        assert "second factor asked" in text
        assert_one_line_per_record(logged.log_format, text, logged.records)
