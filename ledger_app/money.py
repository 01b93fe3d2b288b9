"""Money at the edges: amounts are int minor units inside; Babel knows each currency's exponent."""

from __future__ import annotations

import re
from decimal import Decimal

from babel.numbers import format_currency, get_currency_precision, is_currency
from django.conf import settings

from ledger_app.errors import AmountAboveCeiling, InvalidAmount, InvalidCurrency

MAX_AMOUNT = 2**63 - 1  # what a BigIntegerField holds


def validate_amount(amount: object) -> int:
    """Return `amount` if it is a valid amount of minor units; refuse anything else.

    Valid: an `int` (not a `bool`), greater than zero, at most 2**63 - 1. Floats,
    Decimals and strings are refused even when they hold a whole number: the caller
    has to say exactly what it means.
    """
    if type(amount) is not int:  # excludes bool, float, Decimal, str, None
        raise InvalidAmount(
            f"Amount must be a whole number of minor units, not {type(amount).__name__}."
        )
    if amount <= 0:
        raise InvalidAmount(f"Amount must be greater than zero, not {amount}.")
    if amount > MAX_AMOUNT:
        raise InvalidAmount(f"Amount must be at most {MAX_AMOUNT}.")
    return amount


def amount_ceiling(currency: str) -> int:
    """The largest charge in `currency`, in minor units: settings.AMOUNT_CEILINGS for that
    currency, else settings.AMOUNT_CEILING_DEFAULT (Stripe's: 99999999, $999,999.99).
    Read on every call, so a changed setting applies at once."""
    return settings.AMOUNT_CEILINGS.get(currency.lower(), settings.AMOUNT_CEILING_DEFAULT)


def validate_within_ceiling(amount: int, currency: str) -> int:
    """Return `amount` (a valid amount of `currency`, lower-case) if it is at most the
    currency's ceiling; refuse it with `amount_too_large` otherwise. Every way a charge
    is made calls this; refunds need not, a refund being bounded by its charge."""
    ceiling = amount_ceiling(currency)
    if amount > ceiling:
        raise AmountAboveCeiling(
            f"Amount must be at most {format_money(ceiling, currency)} ({ceiling} minor "
            f"units) for {currency.upper()}."
        )
    return amount


def normalize_currency(currency: object) -> str:
    """Lower-case ISO 4217 code, as stored; unknown codes are refused."""
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isascii():
        raise InvalidCurrency()
    if not is_currency(currency.upper()):
        raise InvalidCurrency(f"Unknown currency {currency!r}.")
    return currency.lower()


def currency_exponent(currency: str) -> int:
    """Digits after the decimal point: usd 2, jpy 0, kwd 3."""
    return get_currency_precision(currency.upper())


def to_major(amount: int, currency: str) -> Decimal:
    """Exact major-unit value of an amount of minor units (1234 usd -> 12.34)."""
    return Decimal(amount).scaleb(-currency_exponent(currency))


def format_money(amount: int, currency: str, locale: str = "en_US") -> str:
    """Human form for display only: $12.34, ¥1,234, KWD 12.345."""
    return format_currency(to_major(amount, currency), currency.upper(), locale=locale)


# What a person may type: ASCII digits (\d would take "١٢٣" and "１２３", which Decimal
# reads as numbers), optionally grouped by commas, optionally a decimal part.
MAJOR_AMOUNT = re.compile(r"^(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?\Z")


def parse_major(text: str, currency: str) -> int:
    """Exact minor units from what a person typed: "12.34" usd -> 1234, "1,234" jpy -> 1234.

    Refuses anything that is not exactly a whole number of minor units ("12.345" usd,
    "1.5" jpy): money is never rounded on the way in. No signs, no exponents.
    """
    cleaned = text.strip()
    if len(cleaned) > 40 or not MAJOR_AMOUNT.match(cleaned):
        raise InvalidAmount(f"{cleaned[:40]!r} is not an amount; type it like 12.34.")
    exponent = currency_exponent(currency)
    minor = Decimal(cleaned.replace(",", "")).scaleb(exponent)
    if minor != minor.to_integral_value():
        places = "no decimal places" if exponent == 0 else f"at most {exponent} decimal places"
        raise InvalidAmount(f"{currency.upper()} amounts have {places}; {cleaned!r} has more.")
    return validate_amount(int(minor))
