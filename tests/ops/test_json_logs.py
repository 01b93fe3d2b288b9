"""Log lines from real processes (a manage.py command, gunicorn): JSON objects, one a line,
with LOG_FORMAT=json, plain text otherwise; each names its request, API key prefix, staff
member, refund and charge when known, and no secret appears anywhere."""

from __future__ import annotations

import json
import logging
import re
import secrets
import string
from datetime import UTC, datetime, timedelta

import pytest
import requests

from ledger_app.access.api_keys import create_api_key
from ledger_app.refunds.services import RefundRequest, create_refund
from serving.logs import LogContextFilter, RedactSecretsFilter, log_context, start_request
from tests.api.conftest import basic_auth
from tests.factories import ChargeFactory
from tests.processes import GunicornServer, run_command

# Secrets the processes are given; none may be written to a log line.
STRIPE_KEY = "sk_live_" + "S" * 30
WEBHOOK_SECRET = "whsec_" + "W" * 32
SECRET_ENV = {"STRIPE_API_KEY": STRIPE_KEY, "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET}
PLAIN_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+) "
    r"\[(req_[0-9a-f]{16}|-)\] (.*)$"
)


def json_lines(text: str) -> list[dict]:
    """Every line of `text` as the JSON object it must be."""
    lines = text.splitlines()
    assert lines, "nothing was logged"
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}\n{text}")
        assert isinstance(parsed[-1], dict), line
    return parsed


def assert_no_secret(text: str, *extra: str) -> None:
    for secret in (STRIPE_KEY, WEBHOOK_SECRET, *extra):
        assert secret not in text
    assert "Authorization" not in text and "Bearer" not in text


def sent_lines(lines: list[dict]) -> list[dict]:
    return [line for line in lines if "sent to the provider" in line["message"]]


@pytest.fixture
def server(transactional_db, tmp_path):
    srv = GunicornServer(
        tmp_path, workers=1, threads=1, env=SECRET_ENV, LOG_FORMAT="json", LOG_LEVEL="DEBUG"
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.mark.django_db(transaction=True)
class TestACommand:
    def test_json_lines_name_the_refund_and_the_charge(self):
        charge = ChargeFactory(amount=5_000)
        started = datetime.now(UTC)

        done = run_command(
            "refund",
            charge.id,
            "--amount",
            "700",
            env=SECRET_ENV,
            LOG_FORMAT="json",
            LOG_LEVEL="DEBUG",
        )

        assert done.returncode == 0, done.stderr
        refund_id = done.stdout.split()[0]
        lines = json_lines(done.stderr)
        [sent] = sent_lines(lines)
        assert sent["level"] == "DEBUG" and sent["logger"] == "ledger_app.dispatch"
        assert sent["refund_id"] == refund_id and sent["charge_id"] == charge.id
        assert sent["request_id"] is None  # no HTTP request here
        assert "api_key_prefix" not in sent and "staff_user" not in sent
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", sent["time"])
        logged_at = datetime.fromisoformat(sent["time"])
        assert logged_at.utcoffset() == timedelta(0)
        assert started - timedelta(seconds=1) <= logged_at <= datetime.now(UTC)
        assert list(sent)[:5] == ["time", "level", "logger", "message", "request_id"]
        assert_no_secret(done.stderr + done.stdout)

    def test_plain_lines_keep_their_shape_and_name_the_same(self):
        charge = ChargeFactory(amount=5_000)

        done = run_command(
            "refund", charge.id, "--amount", "700", env=SECRET_ENV, LOG_FORMAT="", LOG_LEVEL="DEBUG"
        )

        assert done.returncode == 0, done.stderr
        refund_id = done.stdout.split()[0]
        lines = done.stderr.splitlines()
        assert lines and all(PLAIN_LINE.match(line) for line in lines), done.stderr
        [sent] = [line for line in lines if "sent to the provider" in line]
        plain = PLAIN_LINE.match(sent)
        assert plain and plain.groups()[:3] == ("DEBUG", "ledger_app.dispatch", "-")
        assert sent.endswith(f" (refund={refund_id} charge={charge.id})")
        assert_no_secret(done.stderr)

    def test_an_unknown_log_format_stops_it_with_one_line(self):
        done = run_command("check", LOG_FORMAT="yaml")

        assert done.returncode == 2
        assert done.stderr == "error: LOG_FORMAT must be plain or json, not 'yaml'\n"


class TestTheApiThroughGunicorn:
    def test_lines_name_the_request_the_key_prefix_and_what_it_refunded(self, server):
        key, secret = create_api_key(name="logs-test")
        wrong = "sk_" + "".join(secrets.choice(string.ascii_letters) for _ in range(40))
        charge = ChargeFactory(amount=5_000)
        url = server.url

        refunded = requests.post(
            f"{url}/v1/refunds",
            data={"charge": charge.id, "amount": "300"},
            headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "logs-1"},
            timeout=30,
        )
        missing = requests.get(
            f"{url}/v1/charges/ch_missing",
            headers={"Authorization": basic_auth(secret)},
            timeout=30,
        )
        # threads=1: the same thread as the authenticated requests, with no key this time.
        anonymous = requests.get(f"{url}/v1/charges/ch_missing", timeout=30)
        refused = requests.get(
            f"{url}/v1/charges", headers={"Authorization": f"Bearer {wrong}"}, timeout=30
        )

        assert [r.status_code for r in (refunded, missing, anonymous, refused)] == [
            200,
            404,
            401,
            401,
        ]
        text = server.log()
        lines = json_lines(text)
        by_request: dict[str | None, list[dict]] = {}
        for line in lines:
            by_request.setdefault(line["request_id"], []).append(line)
        [sent] = sent_lines(by_request[refunded.headers["Request-Id"]])
        assert sent["api_key_prefix"] == key.prefix
        assert sent["refund_id"] == refunded.json()["id"] and sent["charge_id"] == charge.id
        [not_found] = by_request[missing.headers["Request-Id"]]
        assert not_found["logger"] == "django.request" and not_found["status_code"] == 404
        assert not_found["api_key_prefix"] == key.prefix
        assert "refund_id" not in not_found and "charge_id" not in not_found
        for unnamed in (anonymous, refused):
            request_lines = by_request[unnamed.headers["Request-Id"]]
            assert request_lines
            assert not any("api_key_prefix" in line for line in request_lines)
        assert any(
            "API authentication failed" in line["message"]
            for line in by_request[refused.headers["Request-Id"]]
        )
        assert_no_secret(text, secret, wrong, secret[11:])


class TestTheAdminThroughGunicorn:
    def test_lines_name_the_staff_member_and_never_a_password(self, server, django_user_model):
        password, wrong_password = "Correct-Horse-41", "Wrong-Battery-97"
        django_user_model.objects.create_superuser("ops-lead", "ops@example.com", password)
        charge = ChargeFactory(amount=5_000)
        browser = requests.Session()

        def sign_in(with_password: str) -> requests.Response:
            browser.get(f"{server.url}/admin/login/", timeout=30)
            return browser.post(
                f"{server.url}/admin/login/?next=/admin/",
                data={
                    "username": "ops-lead",
                    "password": with_password,
                    "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                },
                timeout=30,
                allow_redirects=False,
            )

        failed, signed_in = sign_in(wrong_password), sign_in(password)
        # A refund form asks for the second factor, and says so in the log.
        asked = browser.get(
            f"{server.url}/admin/ledger_app/charge/{charge.id}/refund/",
            timeout=30,
            allow_redirects=False,
        )

        assert failed.status_code == 200 and signed_in.status_code == 302
        assert asked.status_code == 302 and "/admin/verify/" in asked.headers["Location"]
        text = server.log()
        lines = json_lines(text)
        [gate] = [line for line in lines if "second factor asked" in line["message"]]
        assert gate["staff_user"] == "ops-lead"
        assert gate["request_id"] == asked.headers["Request-Id"]
        assert not any("staff_user" in line for line in lines if line is not gate)
        assert_no_secret(text, password, wrong_password)


class TestRedaction:
    @pytest.mark.parametrize("log_format", ["json", "plain"])
    def test_secret_shaped_text_is_redacted_wherever_it_is_in_a_line(self, log_format):
        api_secret = "sk_" + "A1b2C3d4" * 5
        planted = [api_secret, "rk_test_" + "R" * 24, STRIPE_KEY, WEBHOOK_SECRET]
        code = (
            "import logging\n"
            "log = logging.getLogger('ops.redaction')\n"
            f"log.warning('keys %s %s then %s', {planted[0]!r}, {planted[1]!r}, 'sk_A1b2C3d4')\n"
            f"log.warning('extra', extra={{'token': {planted[2]!r}}})\n"
            "try:\n"
            f"    raise ValueError({planted[3]!r})\n"
            "except ValueError:\n"
            "    log.exception('failed')\n"
        )

        done = run_command("shell", "-c", code, LOG_FORMAT=log_format)

        assert done.returncode == 0, done.stderr
        for secret in planted:
            assert secret not in done.stderr
        # Both messages' and the traceback's; the extra field is a field of JSON lines only.
        assert done.stderr.count("[redacted]") == (4 if log_format == "json" else 3), done.stderr
        assert "then sk_A1b2C3d4" in done.stderr  # an API key's public prefix stays readable
        if log_format == "json":
            lines = json_lines(done.stderr)
            assert [line["message"] for line in lines] == [
                "keys sk_[redacted] rk_test_[redacted] then sk_A1b2C3d4",
                "extra",
                "failed",
            ]
            assert lines[1]["token"] == "sk_live_[redacted]"
            assert lines[2]["exc_info"].endswith("ValueError: whsec_[redacted]")

    def test_the_filter_redacts_the_record_itself_for_every_handler(self):
        record = logging.LogRecord(
            "t", logging.ERROR, "", 0, "signed with %s", (WEBHOOK_SECRET,), None
        )

        RedactSecretsFilter().filter(record)

        assert record.getMessage() == "signed with whsec_[redacted]"


@pytest.mark.django_db
class TestWhatALineConcerns:
    def test_create_refund_names_its_ids_only_while_it_runs(self):
        start_request()  # what an earlier test's request named stays set in this thread
        charge = ChargeFactory(amount=5_000)
        seen = []

        class Catch(logging.Handler):
            def emit(self, record):
                seen.append(record)

        handler = Catch()
        handler.addFilter(LogContextFilter())
        dispatch = logging.getLogger("ledger_app.dispatch")
        dispatch.addHandler(handler)
        level = dispatch.level
        dispatch.setLevel(logging.DEBUG)  # the send's line is a DEBUG one
        try:
            with log_context(staff_user="someone"):
                refund = create_refund(RefundRequest(charge_id=charge.id, amount=100)).item
                after = logging.LogRecord("t", logging.INFO, "", 0, "after", (), None)
                LogContextFilter().filter(after)
        finally:
            dispatch.setLevel(level)
            dispatch.removeHandler(handler)

        [sent] = [r for r in seen if "sent to the provider" in r.getMessage()]
        assert (sent.refund_id, sent.charge_id, sent.staff_user) == (
            refund.id,
            charge.id,
            "someone",
        )
        # The filter sets it on the record, as `extra=` would; the ids went when create_refund
        # returned.
        assert vars(after)["concerns"] == " (user=someone)"
