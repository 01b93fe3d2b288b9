"""Log lines that name what they concern (the request, the API key's prefix, the staff
member, the refund, the charge and the client's address), as plain text or as JSON lines
(LOG_FORMAT=json), and never a secret: anything shaped like one is redacted before a line
is written. One record is one line: the formatters escape every control character in the
message and in every value a record carries, whoever logged it, so no value from a
request (a path, a filter name, a user name) can start a line of its own."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import logging.config
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TypeVar

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

F = TypeVar("F", bound=Callable)

# A LogRecord's own attributes, set by logging from the code, not from a caller's values.
_RECORD_ATTRS = frozenset(RESERVED_ATTRS) | {"message", "asctime"}

# What a line can say it concerns, and the short name plain lines use for each.
FIELDS = {
    "api_key_prefix": "key",
    "staff_user": "user",
    "refund_id": "refund",
    "charge_id": "charge",
    # serving/client_address.py: the address the lockout and the API's limits count by.
    "client_address": "from",
}
_current: dict[str, ContextVar[str]] = {
    name: ContextVar(f"log_{name}", default="") for name in FIELDS
}

# As before (time, level, logger, [request id], message), then what the line concerns:
# "2026-12-01 20:31:18,123 INFO ledger_app.dispatch [-] refund re_... sent (refund=re_...)".
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s%(concerns)s"

# Stripe's secret and restricted keys (sk_live_..., rk_test_...), this back office's API
# keys (sk_ and 40 characters) and webhook signing secrets (whsec_...). Sixteen characters
# at least, so an API key's public prefix (sk_ and 8) stays readable.
SECRET = re.compile(
    r"(?<![A-Za-z0-9])(?P<kind>sk|rk|whsec)_(?P<mode>live_|test_)?[A-Za-z0-9+/=]{16,}"
)


ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

# Every character that could end a line or rewrite one on a terminal: C0 controls (CR, LF,
# tab, ESC ...), DEL, C1 controls (NEL among them) and Unicode's line and paragraph
# separators. Written as escapes: \n, \r, \t, \x1b, \u2028.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = str.maketrans(
    {
        code: _NAMED.get(chr(code), f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        for code in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
    }
)
# Continuation lines of one record (a traceback, a stack) start with this, so that only
# a record's first line starts at the margin.
CONTINUATION = "  | "


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG: the LOGGING setting, and with LOG_FORMAT=json Python's
    warnings too (Django's, a library's), which would otherwise reach stderr as plain
    text between the JSON lines."""
    from django.conf import settings

    logging.config.dictConfig(config)
    if settings.LOG_FORMAT == "json":
        logging.captureWarnings(True)


def escape(text: str) -> str:
    """`text` on one line: each control character written as its escape."""
    return text.translate(_ESCAPES)


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_escaped(v) for v in value)
    return value


def escaped_record(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of `record` whose message (arguments merged in) and every value it carries
    beyond logging's own attributes (`extra=`, the request id, what it concerns) are
    escaped. The record itself is left as it was for any other handler."""
    copy = logging.makeLogRecord(record.__dict__)
    copy.msg, copy.args = escape(record.getMessage()), ()
    for name, value in record.__dict__.items():
        if name not in _RECORD_ATTRS:
            setattr(copy, name, _escaped(value))
    return copy


def redact(text: str) -> str:
    return SECRET.sub(lambda found: f"{found['kind']}_{found['mode'] or ''}[redacted]", text)


def bind(**fields: str) -> None:
    """Name what the rest of this request concerns (or the rest of the enclosing
    `log_context` block): the API key or the staff member, once authenticated."""
    for name, value in fields.items():
        _current[name].set(value)


@contextlib.contextmanager
def log_context(**fields: str) -> Iterator[None]:
    """Every line logged in this block, in this thread, names `fields`; leaving the block
    restores what was named before, whatever was bound inside it."""
    before = {name: current.get() for name, current in _current.items()}
    bind(**fields)
    try:
        yield
    finally:
        for name, value in before.items():
            _current[name].set(value)


def naming(*params: str) -> Callable[[F], F]:
    """Decorator: while the function runs, every line logged names these arguments of the
    call (each a parameter named like one of FIELDS), e.g. `@naming("charge_id")`."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def named(*args, **kwargs):
            arguments = signature.bind_partial(*args, **kwargs).arguments
            fields = {p: arguments[p] for p in params if _is_id(arguments.get(p))}
            with log_context(**fields):
                return function(*args, **kwargs)

        return named  # type: ignore[return-value]

    return decorate


def _is_id(value: object) -> bool:
    # Whatever a caller passed is named only once it looks like an id: a hostile value
    # (a newline and a fake line after it) never reaches a plain log line.
    return isinstance(value, str) and ID.fullmatch(value) is not None


def start_request() -> None:
    """A request concerns nothing yet. Server threads serve one request after another and
    a context variable outlives its request, so without this a line could name the key
    or the person of the thread's previous request."""
    for current in _current.values():
        current.set("")


class LogContextFilter(logging.Filter):
    """Puts what the line concerns on the record: one attribute per known field (JSON
    lines show them as fields) and `concerns`, their short form for plain lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        named = []
        for name, short in FIELDS.items():
            value = getattr(record, name, "") or _current[name].get()
            if value:
                setattr(record, name, value)
                named.append(f"{short}={value}")
        record.concerns = f" ({' '.join(named)})" if named else ""
        return True


class RedactSecretsFilter(logging.Filter):
    """The second line of defence: no code logs a secret on purpose, but a message that
    carries one anyway (an exception's text, a URL someone pasted) is rewritten with it
    redacted, for every handler, before anything is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken message is the formatter's to report
            return True
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


class PlainFormatter(logging.Formatter):
    """The plain text lines (default): one line a record, its values escaped; a traceback
    or stack follows on lines that start with CONTINUATION, escaped too. Tracebacks and
    anything else the message filter cannot see are redacted here."""

    def __init__(self) -> None:
        # Defaults for records that reach this formatter without the filters.
        super().__init__(PLAIN_FORMAT, defaults={"request_id": "-", "concerns": ""})

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(escaped_record(record))
        first, _, rest = text.partition("\n")
        lines = [first, *(CONTINUATION + escape(line) for line in rest.split("\n") if rest)]
        return redact("\n".join(lines))


class JsonLinesFormatter(JsonFormatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id
    (null outside a request), then whichever of api_key_prefix, staff_user, refund_id,
    charge_id and client_address are known, anything passed with `extra=`, and exc_info
    for a traceback."""

    def __init__(self) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            # `concerns` repeats the fields in plain form; Django's request objects on
            # django.request lines say nothing a field does not.
            reserved_attrs=[*RESERVED_ATTRS, "concerns", "request"],
        )

    def add_fields(self, log_data, record, message_dict) -> None:
        log_data["time"] = (
            datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
        super().add_fields(log_data, record, message_dict)
        request_id = getattr(record, "request_id", "-")
        log_data["request_id"] = None if request_id == "-" else request_id
        # The same fields first on every line, tracebacks last: easier on the eye.
        first = ["time", "level", "logger", "message", "request_id", *FIELDS]
        last = ["exc_info", "stack_info"]
        ordered = [k for k in first if k in log_data]
        ordered += [k for k in log_data if k not in first and k not in last]
        ordered += [k for k in last if k in log_data]
        for key in ordered:
            log_data[key] = log_data.pop(key)

    def format(self, record: logging.LogRecord) -> str:
        # Escaped before encoding, so that the decoded values hold no line break either
        # (a tool that writes them out as text writes one line). A traceback stays as it
        # is: JSON escapes its line breaks. Secret-shaped text contains no quote or
        # backslash, so the line stays valid JSON.
        return redact(super().format(escaped_record(record)))
