"""The one reader of the environment: every variable settings.py reads goes through `env`
here, each with its kind, its default and its bounds, so that a bad value stops start-up
with one line that names the variable and says what it must be (ImproperlyConfigured,
which backoffice/startup.py prints as `error: ...` for manage.py and gunicorn).

It is environs' Env (well kept, typed; it reads os.environ, and so whatever .env loaded
there) with the parsers below, which keep the project's rules for every kind:

- unset or empty (`NAME=` in an environment file) is the default, but for a choice between
  named options, where an empty value names none and is refused;
- numbers are ASCII digits, with a dot for fractions: int() and float() would also take
  "1_6", "+8", "1e3", "nan" and other scripts' digits;
- a bad value is quoted back, cut at 40 characters, except where it may hold a secret
  (a database URL's password, a Fernet key), which is never printed.

Each read is recorded in `env.kinds` (name: kind); tests/test_settings.py finds every
`env.<kind>("NAME", ...)` in settings.py and starts the settings once with a bad value of
each, so a new variable is covered as soon as it is read."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dj_database_url
import environs
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# Django REST framework's rate: requests per period (throttling.SimpleRateThrottle).
RATE = re.compile(r"([0-9]+)/(s|sec|second|m|min|minute|h|hour|d|day)")
WEB = ("http", "https")
FERNET_KEY_BYTES = 32
# A whole number with more digits is refused before int() reads it (past 4,300 digits int()
# raises ValueError, a traceback rather than one line). The largest any setting wants is an
# amount ceiling of twelve digits (Stripe's IDR maximum), the most a ceiling may be.
WHOLE_DIGITS = 15
MAX_CEILING = 999_999_999_999
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True}
SWITCH_WORDS |= {"0": False, "false": False, "no": False, "off": False}


class Wanted(environs.ValidationError):
    """What a variable must be: the rest of the line after its name."""

    def __init__(self, wanted: str, value: str | None = None) -> None:
        shown = "" if value is None else f", not {value[:40]!r}"
        super().__init__(f"must be {wanted}{shown}")


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


# --- the parsers: each takes the variable's text (or its default) -----------------------


def _text(value: str) -> str:
    return value


def _names(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _switch(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    word = value.strip().lower()
    if word not in SWITCH_WORDS:
        raise Wanted("true or false", value)
    return SWITCH_WORDS[word]


def _whole(text: str) -> int | None:
    """The text as a whole number, or None: ASCII digits only, and few enough that int()
    takes them (past 4,300 digits it raises ValueError; no setting wants more than 12)."""
    if not (text.isascii() and text.isdigit() and len(text) <= WHOLE_DIGITS):
        return None
    return int(text)


def _count(value: str | int, *, of: str, low: int, high: int) -> int:
    text = str(value).strip()
    number = _whole(text)
    if number is None or not low <= number <= high:
        raise Wanted(f"a whole number of {of} from {low} to {high}", text)
    return number


def _number(value: str | float, *, of: str, high: float, zero: bool) -> float:
    text = str(value).strip()
    span = f"from 0 to {_plain(high)}" if zero else f"above 0, at most {_plain(high)}"
    wanted = f"a number of {of} {span} (such as 2 or 0.5)"
    if not NUMBER.fullmatch(text):
        raise Wanted(wanted, text)
    number = float(text)
    if not (0 <= number <= high) or (number == 0 and not zero):
        raise Wanted(wanted, text)
    return number


def _choice(
    value: str, *, choices: tuple[str, ...], fold: Callable[[str], str], wanted: str | None
) -> str:
    text = fold(value.strip())
    if text not in choices:
        listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise Wanted(wanted or listed, value)
    return text


def _url(value: str, *, schemes: tuple[str, ...]) -> str:
    text = value.strip()
    try:
        parts = urlsplit(text)
        valid = parts.scheme.lower() in schemes and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number, a bad IPv6 address
        valid = False
    if text and not valid:
        raise Wanted(f"an {' or '.join(s + '://' for s in schemes)} URL with a host", text)
    return text


def _rate(value: str) -> str:
    text = value.strip()
    match = RATE.fullmatch(text)
    if not match or (_whole(match[1]) or 0) < 1:
        raise Wanted("a number of requests per second, minute, hour or day (100/second)", text)
    return text


def _time_zone(value: str) -> str:
    text = value.strip()
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise environs.ValidationError(
            f"{text[:40]!r} is not a known time zone (an IANA name such as UTC, Europe/Paris "
            "or America/New_York)"
        ) from None
    return text


def _fernet_keys(value: str | list[str]) -> list[str]:
    if isinstance(value, list):
        return value
    keys = [key.strip() for key in value.split(",") if key.strip()]
    for number, key in enumerate(keys, 1):
        try:
            valid = len(base64.urlsafe_b64decode(key.encode("ascii"))) == FERNET_KEY_BYTES
        except ValueError:  # not base64, or not ASCII
            valid = False
        if not valid:  # the key itself is never printed
            raise Wanted(
                "Fernet keys, comma-separated (32 bytes in url-safe base64; "
                f"docs/operating/secrets.md says how to make one): key {number} is not one"
            )
    return keys


def _amounts(value: str | dict[str, int]) -> dict[str, int]:
    if isinstance(value, dict):
        return value
    amounts = {}
    for pair in value.split(","):
        if not pair.strip():
            continue
        currency, _, amount = (part.strip() for part in pair.partition("="))
        currency_ok = currency.isascii() and currency.isalpha()
        number = _whole(amount)
        if not (currency_ok and number is not None and 1 <= number <= MAX_CEILING):
            raise Wanted(
                f"currency=amount pairs such as usd=5000000,jpy=1000000 (1 to {MAX_CEILING})",
                pair,
            )
        amounts[currency.lower()] = number
    return amounts


def _database(value: str, **options: Any) -> dict[str, Any]:
    if not value.strip():
        return {}  # an optional database left out (DATABASE_REPLICA_URL)
    try:
        return dict(dj_database_url.parse(value.strip(), **options))
    except Exception:  # dj-database-url raises several kinds, ValueError and others
        # The URL is not printed: it may hold the database's password.
        raise Wanted(
            "a database URL such as postgres://user@host:5432/name or sqlite:///path"
        ) from None


PARSERS: tuple[Callable[..., Any], ...] = (
    _text,
    _names,
    _switch,
    _count,
    _number,
    _choice,
    _url,
    _rate,
    _time_zone,
    _fernet_keys,
    _amounts,
    _database,
)


def _blank_is_default(parser: Callable[..., T]) -> Callable[..., T]:
    """`parser` as environs calls it (with what the environment holds, or the default when
    unset), given the default for an empty value too."""

    def parse(value: Any, *, fallback: Any, **options: Any) -> T:
        return parser(fallback if _blank(value) else value, **options)

    return parse


# --- the reader --------------------------------------------------------------------------


class Environment:
    """environs' Env with one typed method per kind of variable."""

    def __init__(self) -> None:
        self._env = environs.Env(eager=True)
        for parser in PARSERS:
            # read_url, not url: environs has parsers of its own under the plain names.
            self._env.add_parser("read" + parser.__name__, _blank_is_default(parser))
        self.kinds: dict[str, str] = {}

    def _read(
        self, kind: str, name: str, default: object, *, empty: object = None, **options: Any
    ) -> Any:
        """`name` read by environs with the parser of `kind` (an empty value read as
        `empty`, the default unless given), or ImproperlyConfigured that names it and says
        what it must be."""
        self.kinds[name] = kind
        read = getattr(self._env, f"read_{kind}")
        fallback = default if empty is None else empty
        try:
            return read(name, default, fallback=fallback, **options)
        except environs.EnvValidationError as error:
            wanted = "; ".join(str(message) for message in error.error_messages)
            raise ImproperlyConfigured(f"{name} {wanted}") from None

    def text(self, name: str, default: str = "") -> str:
        """Any text (a secret, a name, an address) as given; empty is the default."""
        return self._read("text", name, default)

    def names(self, name: str, default: str = "") -> list[str]:
        """Comma-separated names (hosts, origins), each stripped, empty ones left out."""
        return self._read("names", name, default)

    def switch(self, name: str, default: bool) -> bool:
        """true/false, yes/no, on/off or 1/0, in any case."""
        return self._read("switch", name, default)

    def count(self, name: str, default: int, *, of: str, high: int, low: int = 1) -> int:
        """A whole number of `of` (days, lanes...) from `low` to `high`."""
        return self._read("count", name, default, of=of, low=low, high=high)

    def number(
        self, name: str, default: float, *, of: str, high: float, zero: bool = False
    ) -> float:
        """A number of `of` (seconds, hours...) above 0 (from 0, with `zero`) up to `high`."""
        return self._read("number", name, float(default), of=of, high=high, zero=zero)

    def choice(
        self,
        name: str,
        default: str,
        choices: Iterable[str],
        *,
        fold: Callable[[str], str] = str,
        wanted: str | None = None,
        empty_is_default: bool = False,
    ) -> str:
        """One of `choices`, after `fold` (str.upper, say) of what was given; `wanted` says
        what they are when listing them would not. An empty value names none of them and is
        refused, unless `empty_is_default`: LEDGER_GATEWAY= must not quietly mean the
        simulated provider."""
        options = {"choices": tuple(choices), "fold": fold, "wanted": wanted}
        empty = None if empty_is_default else ""
        return self._read("choice", name, default, empty=empty, **options)

    def url(self, name: str, default: str = "", *, schemes: tuple[str, ...] = WEB) -> str:
        """A URL of one of `schemes` with a host; empty only when the default is."""
        return self._read("url", name, default, schemes=schemes)

    def rate(self, name: str, default: str) -> str:
        """Requests per period, as Django REST framework reads them: 100/second, 5/minute."""
        return self._read("rate", name, default)

    def time_zone(self, name: str, default: str) -> str:
        """An IANA time zone name (UTC, Europe/Paris)."""
        return self._read("time_zone", name, default)

    def fernet_keys(self, name: str) -> list[str]:
        """Comma-separated Fernet keys (none by default)."""
        return self._read("fernet_keys", name, [])

    def amounts(self, name: str) -> dict[str, int]:
        """Comma-separated currency=amount pairs, in minor units (none by default)."""
        return self._read("amounts", name, {})

    def database(self, name: str, default: str, **options: Any) -> dict[str, Any]:
        """A database URL as a DATABASES entry (dj-database-url; `options` go to its parse)."""
        return self._read("database", name, default, **options)


env = Environment()
